package queue

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of Publish and of a Move, for a destination that is full.
var (
	// ErrQueueFull: the backlog holds its capacity. Nothing was stored.
	ErrQueueFull = errors.New("queue: backlog full")
	// ErrKeyQueueFull: the backlog holds the key's capacity. Nothing was
	// stored; other keys are not affected.
	ErrKeyQueueFull = errors.New("queue: backlog full for this key")
	// ErrReadyFull: READY holds its capacity (Config.ReadyCapacity).
	// Nothing was stored.
	ErrReadyFull = errors.New("queue: ready full")
)

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("queue: invalid config")

// ErrInvalidJob is wrapped by the error for a job that cannot be published
// or a message that is not a job.
var ErrInvalidJob = errors.New("queue: invalid job")

// FieldError is one field of a Config that cannot be used. It wraps
// ErrInvalidConfig.
type FieldError struct {
	Queue string
	// Field is the field's name in a configuration file: capacity,
	// per_key_capacity, ready_capacity, replicas, duplicate_window,
	// leak_rate, max_age, max_delay, fairness.min_share, or fairness.weights["KEY"]
	// for one weight rule (KEY* for a prefix rule).
	Field string
	Value string // the value found
	Want  string // what was expected: "an integer ≥ 1", "at most capacity"
	// Other names the field whose value bounds this one ("capacity"), and
	// OtherValue is that value; both are empty when the field is wrong on
	// its own.
	Other, OtherValue string
}

func (e *FieldError) Error() string {
	prefix := ErrInvalidConfig.Error() + ": "
	if e.Queue != "" {
		prefix += "queue " + e.Queue + ": "
	}
	if e.Other != "" {
		return fmt.Sprintf("%s%s %s is larger than %s %s", prefix, e.Field, e.Value, e.Other, e.OtherValue)
	}
	return fmt.Sprintf("%s%s %s: expected %s", prefix, e.Field, e.Value, e.Want)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

// jsMaxMsgs is JetStream's error code for a stream refusing a message over
// its MaxMsgs or MaxMsgsPerSubject with Discard New. The two differ only by
// their description (docs/jetstream-backlog.md; nats-server 2.9 and 2.15).
const jsMaxMsgs jetstream.ErrorCode = 10077

// publishError turns JetStream's refusals of a publish to d into the
// package's errors.
func publishError(d Destination, id string, err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jsMaxMsgs {
		switch {
		case d == Ready:
			return fmt.Errorf("%w (job %s: %w)", ErrReadyFull, id, err)
		case api.Description == "maximum messages per subject exceeded":
			return fmt.Errorf("%w (job %s: %w)", ErrKeyQueueFull, id, err)
		case api.Description == "maximum messages exceeded":
			return fmt.Errorf("%w (job %s: %w)", ErrQueueFull, id, err)
		}
	}
	if errors.Is(err, nats.ErrDisconnected) {
		return fmt.Errorf("queue: publishing job %s: connection lost before the PubAck (it may be stored; publish again with the same id): %w", id, err)
	}
	return fmt.Errorf("queue: publishing job %s: %w", id, err)
}
