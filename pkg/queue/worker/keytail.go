package worker

import (
	"context"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// A key with more jobs in READY than its workers can hold waiting would
// hold back, READY being one FIFO, every job behind them until its own
// drain. So a READY job whose key is at its max, pulled while its worker
// holds as many jobs waiting as it may (keyWaits.most), is moved to
// READY's tail (queue.TailMove) instead of waiting: the jobs behind it
// are pulled next, and those of other keys start. The move is not a try:
// the copy carries the tries spent before this delivery. It is due a
// little later (keyTailDelay, longer each move, carried in
// queue.HeaderKeyMoves), so that a key's jobs going round READY cost a
// bounded number of moves per second. A moved job pulled before it is due
// waits here like a key's waiter, in the same bounded set; if the set is
// full it is moved again as it is (same not-before and count), and the
// pull waits for it to be due, or for a place in the set: READY's head was
// a job moved lately, so the jobs behind it are too, most likely.

// keyTailDelay is how long after its moves-th move to READY's tail (from
// 0) a job is due: 200 ms, doubled each move, 5 s at most.
func keyTailDelay(moves int) time.Duration {
	const first, most = 200 * time.Millisecond, 5 * time.Second
	if moves >= 5 {
		return most
	}
	return min(first<<moves, most)
}

// placeNotDue gives READY job e, bounded by a key's max and not due yet,
// a place among the key's waiters: placed is 1 if it holds one, 0 if it
// needs none (not bounded, or due), -1 if there was none and e was moved
// to READY's tail again, as it is, the pull waiting until it is due or a
// place frees. If the move fails it waits here, beyond the bound. paced
// says its not-before only paces its moves — its own, if it had one,
// passed before its first move — so it need not wait for it: among the
// waiters, it waits for its key. One due within keyTailSlack is taken as
// due (placed 0, paced).
func (r *runner) placeNotDue(e *execution, job queue.Job) (placed int, paced bool) {
	if r.keys == nil || len(job.Concurrency) == 0 || !time.Now().Before(job.NotBefore) {
		return 0, false
	}
	moves := queue.KeyMoves(e.header)
	if moves > 0 && time.Until(job.NotBefore) < keyTailSlack {
		// Due, near enough: the jobs moved with it are due around now.
		// Moved again as it is, it would make the pull wait a moment
		// for each of them.
		return 0, true
	}
	if !r.keys.enter() {
		if r.toTail(e, job.NotBefore, moves) {
			r.keys.pause(job.NotBefore)
			return -1, false
		}
		r.keys.force()
	}
	return 1, moves > 0
}

// keyTailSlack: a job moved to READY's tail is taken as due this long
// before its not-before (placeNotDue).
const keyTailSlack = 50 * time.Millisecond

// toTail moves READY delivery e to READY's tail, due at notBefore, its
// move count set to moves, and acks the delivery. It reports false when
// the job was not moved (the worker is stopping and the job was handed
// back, or the move failed: READY is full, or NATS did not answer); the
// caller keeps it then.
func (r *runner) toTail(e *execution, notBefore time.Time, moves int) bool {
	if !e.claim() {
		return true // handed back: the worker stops
	}
	ctx, cancel := settleCtx(r.hctx)
	defer cancel()
	moved, err := queue.TailMove(e.source(r.cfg.Queue.Name), e.attempt-1, notBefore, moves).Do(ctx, r.js, func(ctx context.Context) error {
		return ack(ctx, e.msg)
	})
	switch {
	case moved == nil:
		e.unclaim()
		r.log.Warn("moving a job whose key is at its max to READY's tail failed; it waits in this worker", "job", e.job.ID, "error", err)
		return false
	case err != nil:
		r.log.Warn("job moved to READY's tail but its ack failed; the delivery comes back after the ack wait and is dropped then as the copy's duplicate", "job", e.job.ID, "error", err)
	}
	r.observe(Event{Kind: KeyMoved, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq, Delay: time.Until(notBefore)})
	return true
}

// stale reports whether READY delivery e, delivered again, is the source
// of a move to the tail whose ack was lost: READY holds a later message of
// the same job (its subject). It then acks it, unrun: the copy runs the
// job. Only a job bounded by a key's max can have been moved, and only a
// delivery after the first can have outlived its move, so only those pay
// the read.
func (r *runner) stale(e *execution, delivered uint64) bool {
	if r.keys == nil || len(e.job.Concurrency) == 0 || delivered < 2 {
		return false
	}
	ctx, cancel := settleCtx(r.ctx)
	defer cancel()
	last, err := queue.FindReady(ctx, r.js, r.cfg.Queue.Name, e.job.ID)
	if err != nil || last == nil || last.Sequence <= e.seq {
		return false // on doubt it runs: at least once
	}
	if !e.claim() {
		return true
	}
	if err := ack(ctx, e.msg); err != nil {
		r.log.Warn("acking a delivery that a move to READY's tail copied failed; it comes back and is dropped again", "job", e.job.ID, "error", err)
	}
	return true
}
