package pace

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Pacer spaces the starts of a queue's backlog jobs at its leak rate.
// Workers that share one Pacer — one store, such as Redis — share one leak
// rate, however many processes they run in.
type Pacer interface {
	// Reserve books the next start and says how long the caller must wait
	// before it may start one job. A booking that is not used is lost: the
	// rate is an upper bound.
	Reserve(ctx context.Context) (time.Duration, error)
}

// PacerGroup is the bucket.Store group that pacers keep their state in.
const PacerGroup = "spillway-pacer"

// pacerAhead bounds the bookings outstanding at once. Each worker process
// holds at most a couple, so this is only a guard against a store full of
// abandoned bookings; past it Reserve waits.
const pacerAhead = 1024

// StorePacer paces with a leaky bucket of delay 0 in a bucket.Store
// (docs/design.md#leaky-bucket: e' = max(0, e − Δt·r + 1), start at t + e'/r). The first
// booking after a pause starts at once; each following one starts exactly
// 1/r after the one before it, as long as it is made before that time.
// A Redis store decides with Redis TIME, so bookings made by processes on
// different machines share one clock. Safe for concurrent use.
type StorePacer struct {
	store bucket.Store
	queue string
	tiers atomic.Pointer[[]bucket.Tier]
}

// NewPacer paces the backlog of queue at rate, keeping its state in store:
// a bucket.Memory paces one process; a redisbucket.Store paces every
// process that uses the same Redis.
func NewPacer(store bucket.Store, q string, rate bucket.Rate) (*StorePacer, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: pacer: nil store", queue.ErrInvalidConfig)
	}
	if err := spillway.ValidateQueueName(q); err != nil {
		return nil, fmt.Errorf("%w: pacer: %w", queue.ErrInvalidConfig, err)
	}
	p := &StorePacer{store: store, queue: q}
	if err := p.SetRate(rate); err != nil {
		return nil, fmt.Errorf("%w: queue %s: %w", queue.ErrInvalidConfig, q, err)
	}
	return p, nil
}

// SetRate changes the leak rate from the next booking on. The store keeps
// the bucket's excess scaled by the rate (bucket.Limit.Scaled): for rates
// whose count divides their period — 5/s, 20/s, 600/m — that is the time
// the booked chain still runs, in nanoseconds, so the chain carries over
// exactly and the next start is 1/r_new after the last one booked.
func (p *StorePacer) SetRate(rate bucket.Rate) error {
	lim, err := bucket.NewLeakyBucket(rate, pacerAhead, 0)
	if err != nil {
		return fmt.Errorf("leak_rate: %w", err)
	}
	p.tiers.Store(&[]bucket.Tier{{Key: p.queue, Limit: lim}})
	return nil
}

// Reserve books the next start of the queue's backlog.
func (p *StorePacer) Reserve(ctx context.Context) (time.Duration, error) {
	for {
		d, err := p.store.Decide(ctx, PacerGroup, *p.tiers.Load(), 1)
		if err != nil {
			return 0, fmt.Errorf("pace: pacer: %w", err)
		}
		switch d.Verdict {
		case bucket.Admitted:
			return 0, nil
		case bucket.Queued:
			return d.NotBefore.Sub(d.At), nil
		}
		// More than pacerAhead bookings are outstanding: wait for one.
		if err := loop.Sleep(ctx, max(d.RetryAfter, time.Millisecond)); err != nil {
			return 0, err
		}
	}
}
