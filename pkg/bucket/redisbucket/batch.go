package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// batchRun bounds the decisions of one script run of DecideBatch, as
// WithMaxBatch bounds a coalesced run; a longer batch is several runs.
const batchRun = maxMaxBatch

var _ bucket.BatchStore = (*Store)(nil)

// DecideBatch decides jobs of one group in order: runs of up to 1,024
// decisions, each one script run. A batch of one run is one round trip; a
// longer one sends its first run alone (which loads the script if Redis
// lost it) and the others in one pipeline. Within
// a run decisions are decided one after the other, each all-or-nothing, as
// coalesced decisions are; Redis executes the runs of a pipeline in order,
// so job i+1 always sees what job i left. Each run reads Redis TIME once
// (or the injected clock once per decision).
//
// Batches do not join the coalesced round trips of Decide: each is its
// own round trip, on a connection of the client's pool, and at most
// WithMaxInFlight batches are under way at once (others wait, and their
// wait does not count against WithTimeout; ctx bounds it). Concurrent
// decisions of other callers may run between two runs of a batch, as they
// may between two Decide calls.
//
// WithTimeout's bound, from the moment the batch's round trip starts,
// applies once per 64 decisions (DefaultMaxBatch, what
// one coalesced round trip carries): a batch of 1,000 has 16 times the
// timeout.
//
// An error fails the whole batch; decisions of runs executed before the
// failure are applied (Redis does not roll a script back).
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
	release, err := s.batchRTs.acquire(ctx, s.maxInFlight)
	if err != nil {
		return nil, fmt.Errorf("redisbucket: %w (not decided)", err)
	}
	defer release()
	if s.timeout > 0 {
		// WithTimeout bounds a round trip of up to DefaultMaxBatch
		// coalesced decisions; a batch gets it once per as many.
		runs := (len(jobs) + DefaultMaxBatch - 1) / DefaultMaxBatch
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(runs)*s.timeout)
		defer cancel()
	}
	calls := make([]*call, len(jobs))
	for i := range jobs {
		c := &call{}
		s.encode(c, group, jobs[i].Tiers, jobs[i].Cost)
		calls[i] = c
	}
	var reqs []request
	for lo := 0; lo < len(calls); lo += batchRun {
		hi := min(lo+batchRun, len(calls))
		r := request{calls: calls[lo:hi], blob: make([]byte, headerSize, 64*(hi-lo)+headerSize)}
		for _, c := range r.calls {
			r.keys = append(r.keys, c.keys...)
			r.blob = append(r.blob, c.buf[headerSize:]...)
		}
		putHeader(r.blob, len(r.calls), s.clock != nil, s.ttlExtra)
		reqs = append(reqs, r)
	}
	// The first run alone: if Redis answers NOSCRIPT it is sent again as
	// EVAL before any later run is sent, so the runs execute in order.
	r := &reqs[0]
	r.cmd = s.client.EvalSha(ctx, scriptSHA, r.keys, r.blob)
	if isNoScript(r.cmd.Err()) {
		r.cmd = s.client.Eval(ctx, script, r.keys, r.blob)
	}
	if len(reqs) > 1 && r.cmd.Err() == nil {
		pipe := s.client.Pipeline()
		for i := 1; i < len(reqs); i++ {
			reqs[i].cmd = pipe.EvalSha(ctx, scriptSHA, reqs[i].keys, reqs[i].blob)
		}
		_, _ = pipe.Exec(ctx)
		// A SCRIPT FLUSH meanwhile: the runs before it executed, those
		// after it were answered NOSCRIPT; send those again, in order.
		pipe = s.client.Pipeline()
		again := false
		for i := 1; i < len(reqs); i++ {
			if isNoScript(reqs[i].cmd.Err()) {
				reqs[i].cmd = pipe.Eval(ctx, script, reqs[i].keys, reqs[i].blob)
				again = true
			}
		}
		if again {
			_, _ = pipe.Exec(ctx)
		}
	}
	out := make([]bucket.Decision, len(jobs))
	k := 0
	for i := range reqs {
		if reqs[i].cmd == nil {
			return nil, fmt.Errorf("job %d: not sent: %w", k, out0Err(reqs[0].cmd))
		}
		s.deliver(reqs[i].cmd, reqs[i].calls)
		for _, c := range reqs[i].calls {
			if c.err != nil {
				return nil, fmt.Errorf("job %d: %w", k, c.err)
			}
			out[k] = c.dec
			k++
		}
	}
	return out, nil
}

// out0Err is the error of the first run, which kept the others from being
// sent.
func out0Err(cmd interface{ Err() error }) error {
	return fmt.Errorf("redisbucket: %w", cmd.Err())
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
