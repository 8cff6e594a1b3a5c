package queue

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultMaxInFlight bounds a Publisher's publishes awaiting their PubAck:
// jetstream's own default bound on pending async publishes, so that the
// publisher pipelines as deeply as raw async publishing does.
const DefaultMaxInFlight = 4000

// Publisher stores jobs in a queue's streams. Publishes are asynchronous on
// the wire — many await their acknowledgement at once, so throughput is not
// one round trip per job — yet Publish returns only once JetStream has
// acknowledged (stored) the job, or refused it. Safe for concurrent use.
//
// How (docs/performance.md has the measurements): callers hand their
// messages to one sending goroutine, which runs only while there is
// something to send and yields once before it starts, so that callers
// woken by the same burst of PubAcks join one batch and the connection
// writes the batch to its socket at once rather than a message at a time.
// PubAcks come back through the ack and error handlers of the publisher's
// own JetStream context, which hand each caller its result directly, with
// no future per publish.
type Publisher struct {
	js  jetstream.JetStream // the publisher's own context, on the caller's connection
	sem chan struct{}       // a slot per publish not yet complete

	pmu     sync.Mutex
	pending map[*nats.Msg]*publish // handed to the sender, not yet complete

	mu      sync.Mutex
	queue   []*publish // waiting for the sender, in arrival order
	spare   []*publish // the previous batch's array, reused
	sending bool       // a sender goroutine is running
}

// publish is one job on its way. Whoever completes it — the PubAck
// handler, the error handler, or the sender when the connection refuses the
// message — removes it from pending, frees its slot and sends the one
// result on done (complete).
type publish struct {
	msg  *nats.Msg
	done chan result // capacity 1: sending never blocks
}

type result struct {
	ack *jetstream.PubAck
	err error
}

var publishPool = sync.Pool{New: func() any { return &publish{done: make(chan result, 1)} }}

// NewPublisher publishes on js's connection with at most maxInFlight
// publishes on the wire (0: DefaultMaxInFlight). It keeps its own JetStream
// context on that connection, to receive PubAcks through handlers, so js's
// async publishing options (pending bound, handlers) do not apply to it.
func NewPublisher(js jetstream.JetStream, maxInFlight int) (*Publisher, error) {
	if js == nil || js.Conn() == nil {
		return nil, fmt.Errorf("%w: nil JetStream or connection", ErrInvalidConfig)
	}
	if maxInFlight == 0 {
		maxInFlight = DefaultMaxInFlight
	}
	if maxInFlight < 0 {
		return nil, fmt.Errorf("%w: max in flight %d: must be ≥ 1", ErrInvalidConfig, maxInFlight)
	}
	p := &Publisher{sem: make(chan struct{}, maxInFlight), pending: make(map[*nats.Msg]*publish)}
	own, err := jetstream.New(js.Conn(),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
			p.complete(m, result{ack: ack})
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			p.complete(m, result{err: err})
		}),
		// Never reached: a publish holds its slot until JetStream has
		// forgotten it, so the context never stalls the sender.
		jetstream.WithPublishAsyncMaxPending(maxInFlight),
	)
	if err != nil {
		return nil, fmt.Errorf("queue: publisher: %w", err)
	}
	p.js = own
	return p, nil
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
// ErrKeyQueueFull, a full READY ErrReadyFull. If ctx ends first, the error
// wraps ctx.Err() and the job may or may not have been stored: publish it again with the same id, which
// stores it at most once. A publish whose caller has gone keeps its slot
// until JetStream answers it, so maxInFlight bounds what is on the wire.
func (p *Publisher) Publish(ctx context.Context, d Destination, j *Job) (Stored, error) {
	t, err := p.Begin(ctx, d, j)
	if err != nil {
		return Stored{}, err
	}
	return t.Wait(ctx)
}

// InFlight is a publish begun by Begin, whose result Wait returns.
type InFlight struct {
	pb *publish
	d  Destination
	id string
}

// Begin hands j to the sender and returns without waiting for its PubAck:
// jobs begun one after the other are sent in that order, so a caller can
// pipeline a run of jobs and keep their order in the streams. Wait for
// each returned InFlight (its slot is held until JetStream answers). The
// errors are Publish's, for a job that was not sent.
func (p *Publisher) Begin(ctx context.Context, d Destination, j *Job) (*InFlight, error) {
	m, err := j.message(d)
	if err != nil {
		return nil, err
	}
	// Set here rather than with jetstream.WithExpectStream: the same
	// header, without an options value built on the sender's path.
	m.Header.Set(jetstream.ExpectedStreamHeader, StreamName(j.Queue, d))
	// Checked first: select picks at random when a slot is free too.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("queue: publishing job %s: not sent: %w", j.ID, err)
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("queue: publishing job %s: not sent: %w", j.ID, ctx.Err())
	}
	pb := publishPool.Get().(*publish)
	pb.msg = m
	p.enqueue(pb)
	return &InFlight{pb: pb, d: d, id: j.ID}, nil
}

// Wait returns when JetStream has acknowledged (stored) or refused the
// job, with Publish's results and errors.
func (t *InFlight) Wait(ctx context.Context) (Stored, error) {
	pb := t.pb
	var r result
	select {
	case r = <-pb.done:
	case <-ctx.Done():
		// pb is still to be completed; it goes to the garbage collector,
		// not back to the pool.
		return Stored{}, fmt.Errorf("queue: publishing job %s: not acknowledged (it may be stored; publish again with the same id): %w", t.id, ctx.Err())
	}
	pb.msg = nil
	publishPool.Put(pb)
	if r.err != nil {
		return Stored{}, publishError(t.d, t.id, r.err)
	}
	return Stored{Stream: r.ack.Stream, Sequence: r.ack.Sequence, Duplicate: r.ack.Duplicate}, nil
}

// enqueue hands pb to the sender, starting one if none runs.
func (p *Publisher) enqueue(pb *publish) {
	p.mu.Lock()
	p.queue = append(p.queue, pb)
	start := !p.sending
	p.sending = true
	p.mu.Unlock()
	if start {
		go p.send()
	}
}

// send publishes what is queued, batch after batch, and returns when the
// queue is empty.
func (p *Publisher) send() {
	// Let the callers that are runnable now — typically those woken by the
	// same burst of PubAcks — queue their jobs first.
	runtime.Gosched()
	p.mu.Lock()
	for len(p.queue) > 0 {
		batch := p.queue
		p.queue = p.spare
		p.mu.Unlock()
		// Registered before sending: a PubAck may come back before
		// PublishMsgAsync returns.
		p.pmu.Lock()
		for _, pb := range batch {
			p.pending[pb.msg] = pb
		}
		p.pmu.Unlock()
		for i, pb := range batch {
			// pb may be completed, and reused, before PublishMsgAsync
			// returns; m stays this publish's message.
			m := pb.msg
			if _, err := p.js.PublishMsgAsync(m); err != nil {
				p.complete(m, result{err: err})
			}
			batch[i] = nil
		}
		p.mu.Lock()
		p.spare = batch[:0]
	}
	p.sending = false
	p.mu.Unlock()
}

// complete ends the publish of m with r, if it has not ended already. It
// runs on the goroutine delivering PubAcks and must not block.
func (p *Publisher) complete(m *nats.Msg, r result) {
	p.pmu.Lock()
	pb, ok := p.pending[m]
	delete(p.pending, m)
	p.pmu.Unlock()
	if !ok {
		return
	}
	<-p.sem
	pb.done <- r
}
