package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/leadership"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
)

// How the backlog drains (docs/design.md#fair-drain):
//
//   - One worker process at a time leads a queue's drain (lease). The
//     leader keeps an index of the backlog by flow — a key's jobs of one
//     priority class, one backlog subject — holding a window of each
//     flow's first jobs (headers only). One consumer of the backlog
//     delivers it every job's headers in stream order, those the backlog
//     held when it took the lease and those that arrive after; it grants
//     nothing until it has seen the former (leader.caughtUp). Only a flow
//     whose window had no room is read by subject. Its fair scheduler
//     (fairSched) picks the next job.
//   - For each pick it books a start from the pace.Pacer — shared by all
//     workers — and publishes a grant: the job's backlog sequence and its
//     booked start, on the queue's GRANTS stream, with the sequence as the
//     message id so a job is granted once. It books at most one start
//     ahead of the next one due, and only while the grants it published
//     are being taken, so the picks stay fresh: a key that becomes due
//     gets one of the next starts.
//   - Every worker pulls grants — one at a time, while it has a handler
//     slot free for it — waits for the booked start and runs the job's
//     handler from its backlog message, heartbeating the grant. Its
//     StartGate, if any, is asked first: a job cancelled meanwhile is
//     deleted and not run (admin.CancelBacklogJob). A success
//     deletes the backlog message, then acks the grant (a plain ack: the
//     delete is the job's durable end, and a grant whose ack is lost
//     comes back, finds no message and is acked then); a failure that may
//     be retried moves the job to READY (the move's message id is its
//     backlog place, so a crash between the move and the delete stores it
//     once); the last failure dead-letters it.
//   - A worker that dies mid-try leaves the grant unacked: JetStream gives
//     it to another worker after the ack wait, which books a new start and
//     runs the job again (at least once). A grant taken late — every
//     handler was busy — books a new start too, so starts never crowd.
//   - The leader grants no start to a job whose concurrency key is at its
//     max (keycap.go): it follows the key slots' holders and holds such a
//     job's flow until a slot frees. A worker that finds the key at its
//     max at the start all the same hands the grant back (startKeys).
//   - A job older than the queue's MaxAge, a job whose expiry (ExpiresAt)
//     comes before the start it could have, or a message that is not a
//     job, goes to DEAD from the leader, taking no start. A worker that
//     reaches a granted job's start after its expiry dead-letters it too.
//
// The drain's JetStream traffic is per start (a grant, its pull, a direct
// get, a delete, a plain ack, and a look at the grants consumer at most
// every demandFresh) plus one headers-only delivery per job to the leader,
// a pull per 128 of them, and the reads by subject of the flows whose
// window had no room; a backlog that waits costs the lease's renewals,
// idle pulls, and the leader consumer's heartbeats and an info of it per
// feedQuiet (consume), whatever its depth.

// requestTimeout bounds one JetStream API request of the drain loop.
const requestTimeout = 5 * time.Second

// Grant headers.
const (
	headerGrantSeq   = "Spillway-Grant-Seq"   // the job's backlog sequence
	headerGrantStart = "Spillway-Grant-Start" // its booked start, unix ns
)

// leaseKey is the entry in the pacer bucket of the lease on queue's drain.
func leaseKey(q string) string { return q + ".drain-leader" }

// grantTransit is how late a grant taken on its first delivery may be and
// still use its booked start: about a grant's way from the leader to a
// worker (a publish, its store, a pull) on a loaded machine. At a leak
// faster than one start per grantTransit — while the workers keep the
// chain of starts busy, a booking is for about now — a grant is that late
// whenever it is taken at once, and booking it again would cost each job
// a second booking and start it no more evenly: the starts it could
// crowd are the few grants published and not yet taken. A leak of at most
// 1/grantTransit (200) a second is unchanged: a grant late by more than a
// start's share is booked again.
const grantTransit = 5 * time.Millisecond

// GrantsConsumer is the durable consumer every worker pulls grants from.
const GrantsConsumer = "spillway-grants"

// drainer takes a queue's grants and starts their jobs in this worker,
// and leads the drain (leader) while this worker holds the lease. The
// Worker hands it what it works with in newDrainer.
type drainer struct {
	parts
	drainStreams
	r      *runner       // runs the jobs it starts
	period time.Duration // one start's share of the leak

	mu      sync.Mutex
	waiting map[jetstream.Msg]struct{} // grants taken, not started yet
	starts  sync.WaitGroup
}

func newDrainer(p parts, s drainStreams, r *runner) *drainer {
	return &drainer{
		parts: p, drainStreams: s, r: r,
		period:  p.cfg.Queue.LeakRate.Per / time.Duration(p.cfg.Queue.LeakRate.Count),
		waiting: make(map[jetstream.Msg]struct{}),
	}
}

// run drains until ctx ends: it leads when it holds the lease, and takes
// grants always. Grants taken and not started are handed back.
func (d *drainer) run(ctx context.Context) {
	var loops sync.WaitGroup
	lease := leadership.NewElector(d.kv, leaseKey(d.cfg.Queue.Name), min(max(d.cfg.AckWait/2, time.Second), 5*time.Second), d.log.Info)
	loops.Go(func() {
		lease.Hold(ctx, func(lctx context.Context) {
			newLeader(leaderDeps{
				js: d.js, queue: d.cfg.Queue, drainStreams: d.drainStreams, book: d.book,
				pause: d.pause, period: d.period, log: d.log, observe: d.observe, keys: d.keyPauses, weights: d.weights,
				ackWait: d.cfg.AckWait, leak: func() (bucket.Rate, bool) { return leakOf(d.cfg) },
			}).run(lctx)
		})
	})
	d.take(ctx)
	loops.Wait()
	d.starts.Wait()
}

// take pulls grants, one at a time, while a handler slot is free for it.
func (d *drainer) take(ctx context.Context) {
	var failures int
	for ctx.Err() == nil {
		if d.pause.Wait(ctx) != nil { // paused: take no grant
			return
		}
		if !d.slots.reserve(ctx.Done()) {
			return
		}
		batch, err := d.grants.Fetch(1, jetstream.FetchMaxWait(d.cfg.FetchWait))
		got := false
		if err == nil {
			for msg := range batch.Messages() {
				got = true
				seq, start, ok := d.grantOf(ctx, msg)
				if !ok {
					d.slots.unreserve()
					continue
				}
				d.mu.Lock()
				d.waiting[msg] = struct{}{}
				d.mu.Unlock()
				// On a kept goroutine, as a READY job's execution: its
				// stack has grown to what the start's get and claim need.
				// The job then runs on it too; run waits for the starts,
				// not for the runs (the runner's grace period is for those).
				d.starts.Add(1)
				d.r.keep.Go(func() {
					run := d.start(ctx, msg, seq, start)
					d.starts.Done()
					if run != nil {
						run()
					}
				})
			}
			err = batch.Error()
		}
		if !got {
			d.slots.unreserve()
		}
		if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			failures++
			d.log.Warn("pulling backlog grants failed; retrying", "error", err, "failures", failures)
			_ = loop.Sleep(ctx, loop.Backoff(failures))
			continue
		}
		failures = 0
	}
}

// grantOf reads a grant: the job's backlog sequence and its start. A
// grant taken again after a worker died, or taken more than a start's
// share of the leak (or grantTransit, if longer) after its booked start
// (every handler was busy), has its start spent: it is booked anew here,
// in the order the grants come, so that a key's jobs keep their order and
// starts never crowd. ok is false for a grant that was dropped or handed
// back.
func (d *drainer) grantOf(ctx context.Context, msg jetstream.Msg) (seq uint64, start time.Time, ok bool) {
	seq, err := strconv.ParseUint(msg.Headers().Get(headerGrantSeq), 10, 64)
	at, err2 := strconv.ParseInt(msg.Headers().Get(headerGrantStart), 10, 64)
	if err != nil || err2 != nil {
		d.log.Error("a grant names no backlog job; dropped", "seq", msg.Headers().Get(headerGrantSeq), "start", msg.Headers().Get(headerGrantStart))
		_ = msg.Term()
		return 0, time.Time{}, false
	}
	start = time.Unix(0, at)
	meta, _ := msg.Metadata()
	if (meta != nil && meta.NumDelivered > 1) || time.Since(start) > max(d.period, grantTransit) {
		wait, err := d.book(ctx)
		if err != nil {
			d.handBack(msg, time.Second, err)
			return 0, time.Time{}, false
		}
		start = time.Now().Add(wait)
	}
	return seq, start, true
}

// start waits for a grant's start and readies its job to run in the slot
// reserved for it: it returns the job's run, nil if it does not run now.
func (d *drainer) start(ctx context.Context, msg jetstream.Msg, seq uint64, start time.Time) (run func()) {
	defer func() {
		d.mu.Lock()
		delete(d.waiting, msg)
		d.mu.Unlock()
	}()
	stop := heartbeat(msg, d.cfg.AckWait/3)
	err := loop.Sleep(ctx, time.Until(start))
	if err == nil && d.paused(ctx) {
		// A pushback came after the start was booked: book again, after
		// the pause.
		var wait time.Duration
		if wait, err = d.cfg.Pacer.Reserve(ctx); err == nil {
			err = loop.Sleep(ctx, wait)
		}
	}
	stop()
	if err != nil {
		d.slots.unreserve()
		d.handBack(msg, 0, nil) // stopping, or the pacer failed: another start
		return nil
	}
	if d.pause.Paused() {
		// Paused after the start was booked: the grant goes back, and
		// whoever takes it after the resume books a new start.
		d.slots.unreserve()
		d.handBack(msg, 0, nil)
		return nil
	}
	if !d.slots.claim() {
		// A READY job took the slot meanwhile: another worker, or this one
		// later, books the job a new start.
		d.handBack(msg, 0, nil)
		return nil
	}
	// A direct get, from any replica (queue.Stream): a "no such message"
	// is confirmed by the stream's leader before the grant is acked as
	// settled; a message that a lagging replica still holds after its
	// delete runs the job again, as a grant taken again after a lost ack
	// would: at least once.
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	raw, err := d.backlog.GetMsg(rctx, seq)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		d.slots.put()
		_ = ackGrant(msg) // settled already, by whoever ran it before
		return nil
	case err != nil:
		d.slots.put()
		d.handBack(msg, time.Second, err)
		return nil
	}
	if d.keyPaused(msg, raw.Subject) {
		d.slots.put()
		return nil
	}
	e := &execution{
		msg: msg, stream: queue.StreamName(d.cfg.Queue.Name, queue.Backlog), seq: seq, subject: raw.Subject,
		header: raw.Header, data: raw.Data, backlog: d.backlog,
	}
	job, err := queue.ParseJob(raw.Header, raw.Data)
	if err != nil {
		d.slots.put()
		if e.claim() {
			d.r.deadLetter(e, 0, "invalid job", err, 0)
		}
		return nil
	}
	if now := time.Now(); !job.ExpiresAt.IsZero() && now.After(job.ExpiresAt) {
		// Granted before its expiry but started after it (a late grant,
		// or one taken again): it never runs.
		d.slots.put()
		if e.claim() {
			e.job = &job
			d.r.deadLetter(e, 0, queue.ReasonExpired, expiredError(job.ExpiresAt, now), 0)
		}
		return nil
	}
	e.job, e.attempt = &job, job.Attempt+1
	if !d.r.startKeys(e) { // per-key concurrency (keywait.go): at its max, the grant goes back
		d.slots.put()
		return nil
	}
	if !d.gate(ctx, e) {
		d.r.releaseKeys(e)
		d.slots.put()
		return nil
	}
	d.observe(Event{Kind: Released, Job: &job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq, Waited: time.Since(job.EnqueuedAt)})
	return d.r.runBacklog(e, job)
}

// booker is a pace.Pacer that can book a start ahead without waiting for it
// (pace.YieldingPacer.Book); pauser tells whether the leak is paused
// (pace.YieldingPacer.PausedUntil).
type (
	booker interface {
		Book(ctx context.Context) (time.Duration, error)
	}
	pauser interface {
		PausedUntil(ctx context.Context) (time.Time, error)
	}
)

// book books a start for the leader: ahead, so that the chain of starts
// stays unbroken while the grant is published and taken. The worker looks
// at the pause again at the start (pausedAt).
func (d *drainer) book(ctx context.Context) (time.Duration, error) {
	if b, ok := d.cfg.Pacer.(booker); ok {
		return b.Book(ctx)
	}
	return d.cfg.Pacer.Reserve(ctx)
}

// paused reports whether the leak is paused now (a pushback came after the
// start was booked): the start is then booked again, after the pause.
func (d *drainer) paused(ctx context.Context) bool {
	p, ok := d.cfg.Pacer.(pauser)
	if !ok {
		return false
	}
	until, err := p.PausedUntil(ctx)
	return err == nil && until.After(time.Now())
}

// gate asks the StartGate whether the job of e may start. A cancelled
// job's backlog message is deleted and its grant acked; a gate that fails
// hands the grant back. It reports whether the job starts now.
func (d *drainer) gate(ctx context.Context, e *execution) bool {
	if d.cfg.StartGate == nil {
		return true
	}
	gctx, cancel := context.WithTimeout(ctx, requestTimeout)
	err := d.cfg.StartGate(gctx, Event{Kind: Started, Queue: d.cfg.Queue.Name, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	cancel()
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrJobCancelled):
		if e.claim() {
			sctx, cancel := settleCtx(ctx)
			defer cancel()
			if err := e.settleSource(sctx); err != nil {
				d.log.Warn("a cancelled backlog job was not removed; its next grant removes it", "job", e.job.ID, "error", err)
			}
		}
		return false
	default:
		d.handBack(e.msg, time.Second, fmt.Errorf("start gate of job %s: %w", e.job.ID, err))
		return false
	}
}

// handBack gives a grant back for another start.
func (d *drainer) handBack(msg jetstream.Msg, delay time.Duration, cause error) {
	if cause != nil {
		d.log.Warn("starting a backlog job failed; its grant goes back", "error", cause)
	}
	if err := msg.NakWithDelay(delay); err != nil {
		d.log.Warn("handing a backlog grant back failed; it is delivered again after the ack wait", "error", err)
	}
}
