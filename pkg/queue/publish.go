package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrQueueFull: the backlog holds its capacity. Nothing was stored.
	ErrQueueFull = errors.New("queue: backlog full")
	// ErrKeyQueueFull: the backlog holds the key's capacity. Nothing was
	// stored; other keys are not affected.
	ErrKeyQueueFull = errors.New("queue: backlog full for this key")
)

// DefaultMaxInFlight bounds a Publisher's publishes awaiting their PubAck:
// jetstream's own default bound on pending async publishes, so that the
// publisher pipelines as deeply as raw async publishing does.
const DefaultMaxInFlight = 4000

// Publisher stores jobs in a queue's streams. Publishes are asynchronous on
// the wire — many await their acknowledgement at once, so throughput is not
// one round trip per job — yet Publish returns only once JetStream has
// acknowledged (stored) the job, or refused it. Safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	sem chan struct{}
}

// NewPublisher publishes through js with at most maxInFlight publishes
// awaiting acknowledgement (0: DefaultMaxInFlight). js must allow at least
// that many pending async publishes (jetstream.WithPublishAsyncMaxPending;
// its default is 4000).
func NewPublisher(js jetstream.JetStream, maxInFlight int) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidConfig)
	}
	if maxInFlight == 0 {
		maxInFlight = DefaultMaxInFlight
	}
	if maxInFlight < 0 {
		return nil, fmt.Errorf("%w: max in flight %d: must be ≥ 1", ErrInvalidConfig, maxInFlight)
	}
	return &Publisher{js: js, sem: make(chan struct{}, maxInFlight)}, nil
}

// Stored is what JetStream acknowledged.
type Stored struct {
	Stream   string
	Sequence uint64
	// Duplicate: a job with this id was already stored within the
	// duplicate window; this publish stored nothing new.
	Duplicate bool
}

// Publish stores j in the queue's destination stream and returns when
// JetStream has acknowledged it. A full backlog is ErrQueueFull or
// ErrKeyQueueFull. If ctx ends first, the error wraps ctx.Err() and the job
// may or may not have been stored: publish it again with the same id, which
// stores it at most once.
func (p *Publisher) Publish(ctx context.Context, d Destination, j *Job) (Stored, error) {
	m, err := j.message(d)
	if err != nil {
		return Stored{}, err
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return Stored{}, fmt.Errorf("queue: publishing job %s: not sent: %w", j.ID, ctx.Err())
	}
	defer func() { <-p.sem }()
	fut, err := p.js.PublishMsgAsync(m, jetstream.WithExpectStream(StreamName(j.Queue, d)))
	if err != nil {
		return Stored{}, fmt.Errorf("queue: publishing job %s: %w", j.ID, err)
	}
	select {
	case ack := <-fut.Ok():
		return Stored{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
	case err := <-fut.Err():
		return Stored{}, publishError(j.ID, err)
	case <-ctx.Done():
		return Stored{}, fmt.Errorf("queue: publishing job %s: sent, not acknowledged (it may be stored; publish again with the same id): %w", j.ID, ctx.Err())
	}
}

// jsMaxMsgs is JetStream's error code for a stream refusing a message over
// its MaxMsgs or MaxMsgsPerSubject with Discard New. The two differ only by
// their description (docs/jetstream-backlog.md; nats-server 2.9 and 2.15).
const jsMaxMsgs jetstream.ErrorCode = 10077

// publishError turns JetStream's refusals into the package's errors.
func publishError(id string, err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jsMaxMsgs {
		switch api.Description {
		case "maximum messages per subject exceeded":
			return fmt.Errorf("%w (job %s: %w)", ErrKeyQueueFull, id, err)
		case "maximum messages exceeded":
			return fmt.Errorf("%w (job %s: %w)", ErrQueueFull, id, err)
		}
	}
	return fmt.Errorf("queue: publishing job %s: %w", id, err)
}
