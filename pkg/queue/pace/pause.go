package pace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/internal/kvwatch"
)

// A queue is paused (docs/design.md#pause) by an operator: its workers
// start none of its jobs — neither READY's nor the backlog's — until it is
// resumed, while admission goes on and the backlog's bound holds. The
// state is one entry of the pacers' bucket, PauseKey, that every worker
// watches (Pauser); nothing is lost, only held.

// PauseKey is the key of a queue's PauseState in the pacers' bucket
// (PacerBucket).
func PauseKey(q string) string { return q + ".paused" }

// PauseState is whether a queue is paused, as kept in its PauseKey entry.
// The zero value is a queue never paused.
type PauseState struct {
	Paused bool `json:"paused"`
	// At is when it was paused or resumed.
	At time.Time `json:"at"`
	// By names who did it: an admin key's fingerprint, never the key.
	By string `json:"by,omitempty"`
	// Reason is the operator's, optional.
	Reason string `json:"reason,omitempty"`
}

// SetPause writes a queue's pause state in the pacers' bucket, which it
// creates if no worker did yet (replicas as OpenPacerBucket's).
func SetPause(ctx context.Context, js jetstream.JetStream, q string, replicas int, st PauseState) error {
	kv, err := OpenPacerBucket(ctx, js, replicas)
	if err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("pace: pause state of %s: %w", q, err)
	}
	if _, err := kv.Put(ctx, PauseKey(q), b); err != nil {
		return fmt.Errorf("pace: pause state of %s: %w", q, err)
	}
	return nil
}

// ReadPause reads a queue's pause state: the zero PauseState when the
// bucket or the entry does not exist.
func ReadPause(ctx context.Context, js jetstream.JetStream, q string) (PauseState, error) {
	kv, err := js.KeyValue(ctx, PacerBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return PauseState{}, nil
	}
	if err != nil {
		return PauseState{}, fmt.Errorf("pace: pacer bucket %s: %w", PacerBucket, err)
	}
	e, err := kv.Get(ctx, PauseKey(q))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return PauseState{}, nil
	}
	if err != nil {
		return PauseState{}, fmt.Errorf("pace: pause state of %s: %w", q, err)
	}
	return DecodePause(e.Value()), nil
}

// DecodePause reads an entry's value; an unreadable one is not a pause
// (a worker must not stop on garbage), nor is a deleted entry's.
func DecodePause(b []byte) PauseState {
	var st PauseState
	if len(b) == 0 || json.Unmarshal(b, &st) != nil {
		return PauseState{}
	}
	return st
}

// Pauser follows a queue's pause state by watching its entry, so that a
// pause reaches a worker as soon as JetStream delivers it. Its zero value
// (and a nil *Pauser) is never paused. Safe for concurrent use.
type Pauser struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when not paused; replaced on a pause
}

// NewPauser returns a Pauser not paused, which Run keeps up to date.
func NewPauser() *Pauser {
	p := &Pauser{resumed: make(chan struct{})}
	close(p.resumed)
	return p
}

// Paused reports whether the queue is paused now.
func (p *Pauser) Paused() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Wait blocks while the queue is paused; it returns ctx's error if ctx
// ends first.
func (p *Pauser) Wait(ctx context.Context) error {
	if p == nil {
		return ctx.Err()
	}
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	select {
	case <-ch:
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Pauser) set(paused bool) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == paused {
		return false
	}
	p.paused = paused
	if paused {
		p.resumed = make(chan struct{})
	} else {
		close(p.resumed)
	}
	return true
}

// Run watches queue's entry in kv until ctx ends, watching again after a
// failure. While the watch is broken the last state holds. It closes
// known once the entry's value at the start was delivered.
func (p *Pauser) Run(ctx context.Context, kv jetstream.KeyValue, q string, log *slog.Logger, known chan<- struct{}) {
	kvwatch.Run(ctx, kv, PauseKey(q), known, log, "the queue's pause state", func(e jetstream.KeyValueEntry) {
		st := PauseState{}
		if e.Operation() == jetstream.KeyValuePut {
			st = DecodePause(e.Value())
		}
		if p.set(st.Paused) {
			if st.Paused {
				log.Info("queue paused: starting none of its jobs until it is resumed", "by", st.By, "reason", st.Reason)
			} else {
				log.Info("queue resumed", "by", st.By)
			}
		}
	})
}
