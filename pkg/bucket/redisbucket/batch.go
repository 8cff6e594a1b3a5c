package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

var _ bucket.BatchStore = (*Store)(nil)

// batchSlotsPer is how many batches may be under way per round-trip slot
// of Decide (WithMaxInFlight): a batch's runs go one after the other, so
// several batches keep Redis as busy as the coalesced round trips do.
const batchSlotsPer = 4

// DecideBatch decides jobs of one group in order, in runs of up to
// WithMaxBatch decisions (default 64), each one script run and one round
// trip, sent one after the other on the caller's goroutine: job i+1
// always sees what job i left. A run is what a coalesced round trip of
// Decide carries, so it reads Redis TIME once (or the injected clock once
// per decision) and WithTimeout bounds each run, and the client's read
// timeout, which bounds one command or one pipeline, holds for a batch of
// any length.
//
// Batches do not join the coalesced round trips of Decide, and at most
// four times WithMaxInFlight batches are under way at once: others wait, and their
// wait does not count against WithTimeout (ctx bounds it). Concurrent
// decisions of other callers may run between two runs of a batch, as they
// may between two Decide calls.
//
// An error fails the whole batch; the runs before the failure are applied
// (Redis does not roll a script back), and none after it is sent.
func (s *Store) DecideBatch(ctx context.Context, group string, jobs []bucket.Job) ([]bucket.Decision, error) {
	if err := bucket.CheckBatch(jobs); err != nil {
		return nil, fmt.Errorf("redisbucket: %w", err)
	}
	if s.client == nil {
		return nil, errors.New("redisbucket: the Store was not built with New")
	}
	if strings.ContainsAny(group, "{}") {
		return nil, fmt.Errorf("%w %q: it must not hold '{' or '}'", ErrInvalidGroup, group)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisbucket: %w", err)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	// Wait for a round-trip slot of the batches: a batch is many
	// decisions' work for Redis, and batches queued here rather than in
	// Redis do not spend one another's timeouts.
	release, err := s.batchRTs.acquire(ctx, batchSlotsPer*s.maxInFlight)
	if err != nil {
		return nil, fmt.Errorf("redisbucket: %w (not decided)", err)
	}
	defer release()
	if s.splitTiers {
		return s.decideBatchSplit(ctx, group, jobs)
	}
	out := make([]bucket.Decision, 0, len(jobs))
	calls := make([]*call, 0, s.maxBatch)
	for lo := 0; lo < len(jobs); lo += s.maxBatch {
		calls = calls[:0]
		r := request{blob: make([]byte, headerSize, 1024)}
		for i := lo; i < min(lo+s.maxBatch, len(jobs)); i++ {
			c := &call{}
			s.encode(c, group, jobs[i].Tiers, jobs[i].Cost)
			calls = append(calls, c)
			r.keys = append(r.keys, c.keys...)
			r.blob = append(r.blob, c.buf[headerSize:]...)
		}
		putHeader(r.blob, len(calls), s.clock != nil, s.ttlExtra)
		s.run(ctx, &r, calls)
		for i, c := range calls {
			if c.err != nil {
				return nil, fmt.Errorf("job %d: %w", lo+i, c.err)
			}
			c.dec.Bind(s, group, jobs[lo+i].Tiers, jobs[lo+i].Cost)
			out = append(out, c.dec)
		}
	}
	return out, nil
}

// run sends one script run of a batch, bounded by WithTimeout, and sets
// its calls' decisions.
func (s *Store) run(ctx context.Context, r *request, calls []*call) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	s.deliver(s.runScript(ctx, decideScript, r.keys, r.blob), calls)
}

// batchSlots bounds the batches under way in one store.
type batchSlots struct {
	once  sync.Once
	slots chan struct{}
}

// acquire waits for a slot (n slots in all) or for ctx, and returns the
// function that gives it back.
func (b *batchSlots) acquire(ctx context.Context, n int) (func(), error) {
	b.once.Do(func() { b.slots = make(chan struct{}, n) })
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case b.slots <- struct{}{}:
		return func() { <-b.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// decideBatchSplit is DecideBatch for split decisions. A run is one
// pipeline of the runs' parts, one script per hash tag holding the parts of
// that tag in job order, so job i+1 sees what job i left in every tier.
// When job i is rejected after some of its parts took their units, the
// jobs after it in the run decided on top of those units: job i's parts
// and every later job's are given back (one pipeline of refunds), and the
// next run starts at job i+1, so the batch decides as if one after the
// other. A failed part fails the batch the same way, after giving back the
// run's units from the failed job on.
func (s *Store) decideBatchSplit(ctx context.Context, group string, jobs []bucket.Job) ([]bucket.Decision, error) {
	out := make([]bucket.Decision, 0, len(jobs))
	for lo := 0; lo < len(jobs); {
		hi := min(lo+s.maxBatch, len(jobs))
		calls := make([]*call, 0, hi-lo)
		for i := lo; i < hi; i++ {
			c := &call{}
			s.encodeParts(c, group, jobs[i].Tiers, jobs[i].Cost)
			calls = append(calls, c)
		}
		s.runRun(ctx, calls)
		next := hi
		for i, c := range calls {
			undo := assemble(c)
			if c.err == nil {
				c.dec.Bind(s, group, jobs[lo+i].Tiers, jobs[lo+i].Cost)
			}
			if c.err == nil && !undo {
				out = append(out, c.dec)
				continue
			}
			rctx, cancel := s.refundContext(ctx)
			_ = s.runSettles(rctx, s.undoRequests(calls[i:]), "refund")
			cancel()
			if c.err != nil {
				return nil, fmt.Errorf("job %d: %w", lo+i, c.err)
			}
			out = append(out, c.dec)
			next = lo + i + 1
			break
		}
		lo = next
	}
	return out, nil
}

// runRun sends one run of split decisions, bounded by WithTimeout.
func (s *Store) runRun(ctx context.Context, calls []*call) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	s.runParts(ctx, calls)
}

// refundContext bounds a refund by WithTimeout.
func (s *Store) refundContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return ctx, func() {}
}
