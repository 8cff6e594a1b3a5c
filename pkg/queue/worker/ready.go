package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// runner pulls jobs from the ready consumer, never more than it has free
// handlers for (so no job waits in this process while another worker is
// idle), and runs each with heartbeats until it is settled: acked, nak'd
// for a retry, dead-lettered or handed back. It also runs the backlog jobs
// the drainer starts (runBacklog), in the same slots.
type runner struct {
	parts
	handle Handler
	cons   jetstream.Consumer
	ctx    context.Context // Run's: a job not started yet when it ends is handed back
	hctx   context.Context // handlers' context: canceled when the grace period ends

	mu         sync.Mutex
	active     map[*execution]struct{}
	stopping   bool
	idleCh     chan struct{}
	lastStallW time.Time
	randMu     sync.Mutex // guards cfg.Rand, which need not be safe for concurrent use
	keep       *keeper    // the executions' goroutines
}

// execution is one delivery of a job being run: from READY, or a backlog
// job run from its backlog message at its booked start.
type execution struct {
	msg     jetstream.Msg
	stream  string // where the delivered message is
	seq     uint64 // its place there (0 if unknown)
	subject string
	header  nats.Header // the stored message, for a dead letter or a retry
	data    []byte
	job     *queue.Job
	attempt int
	// backlog is set for a job run from its backlog message, msg being
	// its grant: settling it deletes the message there, then acks the
	// grant. A retry moves it to READY, since the backlog is for jobs
	// waiting for their first start.
	backlog jetstream.Stream
	done    func() // called when the execution ends, if set

	keys *keyHold // the key slots it holds (keywait.go)

	mu      sync.Mutex
	settled bool
}

// settleSource removes a settled job from where it was: it acks a READY
// delivery, and waits for the ack's confirmation; it deletes a backlog
// job's message, then acks its grant, without waiting (ackGrant).
func (e *execution) settleSource(ctx context.Context) error {
	if e.backlog != nil {
		if err := queue.RemoveMsg(ctx, e.backlog, e.seq); err != nil {
			return err
		}
		return ackGrant(e.msg)
	}
	return ack(ctx, e.msg)
}

// source is the delivered message, the source of its moves.
func (e *execution) source(q string) queue.Source {
	return queue.Source{Queue: q, Subject: e.subject, Stream: e.stream, Seq: e.seq, Header: e.header, Data: e.data}
}

// claim reports whether the caller is the one to settle the delivery.
func (e *execution) claim() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.settled {
		return false
	}
	e.settled = true
	return true
}

// unclaim gives back a claim whose settle did not happen (a move to
// READY's tail that failed): whoever stops the job next settles it.
func (e *execution) unclaim() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settled = false
}

func newRunner(ctx, hctx context.Context, p parts, h Handler, cons jetstream.Consumer) *runner {
	return &runner{
		parts: p, handle: h, cons: cons, ctx: ctx, hctx: hctx,
		active: make(map[*execution]struct{}),
		idleCh: make(chan struct{}),
		keep:   newKeeper(),
	}
}

// pull fetches and starts jobs until ctx ends. The pull request in flight
// when ctx ends is allowed to finish (at most FetchWait), so that no job is
// delivered to this worker and then left unattended. A pull asks for as many
// jobs as there are free handlers, without holding them: the drainer may
// take one for a backlog job's start meanwhile, and a job the pull then
// brings for it waits for the next free handler.
func (r *runner) pull(ctx context.Context) {
	var failures int
	for ctx.Err() == nil {
		if r.pause.Wait(ctx) != nil { // paused: pull nothing
			return
		}
		n := r.slots.room(ctx.Done())
		if n = r.keys.room(ctx.Done(), n); n == 0 { // jobs waiting for a key slot are bounded (keywait.go)
			return
		}
		batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(r.cfg.FetchWait))
		if err != nil {
			failures++
			r.log.Warn("pulling ready jobs failed; retrying", "error", err, "failures", failures)
			_ = loop.Sleep(ctx, loop.Backoff(failures))
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			r.start(msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			failures++
			r.log.Warn("pulling ready jobs failed; retrying", "error", err, "failures", failures)
			_ = loop.Sleep(ctx, loop.Backoff(failures))
			continue
		}
		failures = 0
		if got == 0 {
			r.checkStall(ctx)
		}
	}
}

// start runs a READY delivery. It takes its handler slot at once if one is
// free, so that the next pull does not count it as free.
func (r *runner) start(msg jetstream.Msg) {
	e := &execution{msg: msg}
	slot := r.slots.tryTake()
	r.track(e)
	r.keep.Go(func() { r.execute(e, slot) })
}

// runBacklog counts a backlog job whose booked start came as running and
// returns its run, in the handler slot the drainer took for it: the
// drainer calls it on the goroutine that started the job.
func (r *runner) runBacklog(e *execution, job queue.Job) (run func()) {
	r.track(e)
	return func() {
		defer r.finish(e)
		defer r.slots.put()
		r.try(e, job)
	}
}

func (r *runner) track(e *execution) {
	r.mu.Lock()
	r.active[e] = struct{}{}
	r.mu.Unlock()
}

// finish forgets e.
func (r *runner) finish(e *execution) {
	r.releaseKeys(e)
	if e.done != nil {
		e.done()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.active, e)
	if r.stopping && len(r.active) == 0 {
		select {
		case <-r.idleCh:
		default:
			close(r.idleCh)
		}
	}
}

// idle marks the runner as stopping and returns a channel closed once no
// job is running.
func (r *runner) idle() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	if len(r.active) == 0 {
		select {
		case <-r.idleCh:
		default:
			close(r.idleCh)
		}
	}
	return r.idleCh
}

func (r *runner) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.active)
}

// handBackAll gives every unsettled job back to JetStream once the grace
// period is over. It claims the jobs before cancelHandlers cancels their
// handlers: a handler that returns as its context ends would otherwise
// settle its job first, as a failed try (an attempt spent, or a dead
// letter) rather than a job handed back. Handlers still running are
// abandoned: whatever they return is ignored.
func (r *runner) handBackAll(cancelHandlers func()) {
	r.mu.Lock()
	var left []*execution
	for e := range r.active {
		left = append(left, e)
	}
	r.mu.Unlock()
	var claimed []*execution
	for _, e := range left {
		if e.claim() {
			claimed = append(claimed, e)
		}
	}
	cancelHandlers()
	for _, e := range claimed {
		r.handBack(e)
	}
}

// handBack gives a started job back: a READY job to READY; a backlog
// job's grant to the grants, where a worker takes it and books it a new
// start.
func (r *runner) handBack(e *execution) {
	if err := e.msg.Nak(); err != nil {
		r.log.Warn("handing a job back failed; JetStream will deliver it again after the ack wait", "error", err)
	}
	r.observe(Event{Kind: HandedBack, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
}

// execute runs a READY delivery, in the slot start took or, if none was
// free, in the next one.
func (r *runner) execute(e *execution, slot bool) {
	defer r.finish(e)
	defer func() {
		if slot {
			r.slots.put()
		}
	}()
	meta, err := e.msg.Metadata()
	if err != nil { // not a JetStream delivery: cannot happen on a pull consumer
		r.log.Error("a ready delivery has no JetStream metadata", "subject", e.msg.Subject(), "error", err)
		return
	}
	e.stream, e.seq, e.subject = meta.Stream, meta.Sequence.Stream, e.msg.Subject()
	e.header, e.data = e.msg.Headers(), e.msg.Data()
	job, err := queue.ParseJob(e.header, e.data)
	if err != nil {
		if e.claim() {
			r.deadLetter(e, int(meta.NumDelivered), "invalid job", err, 0)
		}
		return
	}
	e.job = &job
	e.attempt = job.Attempt + int(meta.NumDelivered)
	if r.stale(e, meta.NumDelivered) { // a move to READY's tail copied it (keytail.go)
		return
	}
	// A job bounded by a key's max and not due waits among the key's
	// waiters, whose number is bounded; if they are full it goes to
	// READY's tail again, as it is, and the pull waits (keytail.go).
	placed, paced := r.placeNotDue(e, job)
	if placed < 0 {
		return // moved
	}
	if wait := time.Until(job.NotBefore); wait > 0 && !paced {
		// Not due: a failed backlog job's retry, or a clock ahead of ours
		// stamped it. Held here, with heartbeats and no handler, until it
		// is: handed back, it would be delivered again, and every delivery
		// counts as a try.
		if slot {
			r.slots.put()
			slot = false
		}
		stop := heartbeat(e.msg, r.cfg.AckWait/3)
		err := loop.Sleep(r.ctx, wait)
		stop()
		if err != nil {
			if placed > 0 {
				r.keys.leave()
			}
			if e.claim() { // stopping: back to READY until it is due
				if err := e.msg.NakWithDelay(max(time.Until(job.NotBefore), 0)); err != nil {
					r.log.Warn("handing back a job that is not due failed; JetStream will deliver it again after the ack wait", "job", job.ID, "error", err)
				}
			}
			return
		}
	}
	if !r.waitKeys(e, &slot, placed > 0) { // per-key concurrency (keywait.go)
		return
	}
	if !slot {
		// Due, and every handler busy: the drainer took one for a backlog
		// start while this job was on its way. Wait for the next.
		if slot = r.slots.take(r.ctx.Done()); !slot {
			if e.claim() { // stopping before it started: not a try
				if err := e.msg.Nak(); err != nil {
					r.log.Warn("handing a job back failed; JetStream will deliver it again after the ack wait", "job", job.ID, "error", err)
				}
			}
			return
		}
	}
	if r.pause.Paused() {
		// Pulled before the pause came: held here in its slot, with
		// heartbeats, until the resume (docs/design.md#pause). Handed
		// back, it would go at once to a pull still open — this
		// worker's or another's — and back again, and every delivery
		// counts as a try: it could use up its tries and be
		// dead-lettered without ever running.
		stop := heartbeat(e.msg, r.cfg.AckWait/3)
		err := r.pause.Wait(r.ctx)
		stop()
		if err != nil {
			if e.claim() { // stopping while paused: back to READY
				if err := e.msg.Nak(); err != nil {
					r.log.Warn("handing a job back failed; JetStream will deliver it again after the ack wait", "job", job.ID, "error", err)
				}
			}
			return
		}
	}
	r.try(e, job)
}

// try runs one try of a job in a slot of its own and settles it.
func (r *runner) try(e *execution, job queue.Job) {
	if most := r.cfg.Retry.Attempts(); e.attempt > most {
		// The worker of the last allowed try stopped before settling it.
		if e.claim() {
			r.deadLetter(e, e.attempt-1, fmt.Sprintf("attempts exhausted (%d of %d; the last try did not finish)", e.attempt-1, most), nil, 0)
		}
		return
	}
	job.Attempt = e.attempt
	r.observe(Event{Kind: Started, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	stop := heartbeat(e.msg, r.cfg.AckWait/3)
	began := time.Now()
	herr := r.call(&job)
	took := time.Since(began)
	stop()
	if n, ok := job.CostActual(); ok && herr == nil {
		e.job.SetCostActual(n) // the handler had a copy
	}
	if e.claim() {
		r.settle(e, herr, took)
	}
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(j *queue.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("handler panicked", "job", j.ID, "attempt", j.Attempt, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.handle(r.hctx, j)
}

// next decides what follows a failed try. The random source need not be
// safe for concurrent use, so it is guarded here.
func (r *runner) next(attempt int, err error) retry.Decision {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.cfg.Retry.Next(attempt, err, r.cfg.Rand)
}

// yield tells the pacer when a handler's downstream pushed back
// (retry.IsPushback): the queue's leak pauses on every worker
// (docs/design.md#pushback). READY jobs are not held: they were admitted
// within the queue's limits. With the pushback scope key, only the job's
// key pauses (yieldKey).
func (r *runner) yield(e *execution, herr error) {
	after, ok := retry.IsPushback(herr)
	if !ok {
		return
	}
	if r.keyPauses != nil {
		r.yieldKey(e, after)
		return
	}
	y, ok := r.cfg.Pacer.(pace.Yielder)
	if !ok {
		return
	}
	ctx, cancel := settleCtx(context.Background())
	defer cancel()
	if err := y.Yield(ctx, after); err != nil {
		r.log.Warn("the downstream pushed back but pausing the leak failed; the leak runs on", "error", err)
	}
}

// settle acks a success, and after a failure schedules a retry or moves the
// job to the dead-letter stream. A failure after the grace period ended is
// the stop's doing, not the job's: the job is handed back. A READY job's
// retry is a nak with the delay; a backlog job's is a move to READY
// (moveToRetry).
func (r *runner) settle(e *execution, herr error, took time.Duration) {
	if herr == nil {
		ctx, cancel := settleCtx(r.hctx)
		defer cancel()
		ev := Event{Kind: Succeeded, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq, Took: took}
		r.settleCost(ctx, e.job)
		r.outcome(ctx, e, ev)
		if err := e.settleSource(ctx); err != nil {
			r.log.Error("job succeeded but its ack failed; JetStream will deliver it again", "job", e.job.ID, "error", err)
			return
		}
		r.observe(ev)
		return
	}
	if r.hctx.Err() != nil {
		r.handBack(e)
		return
	}
	r.yield(e, herr)
	d := r.next(e.attempt, herr)
	if d.Verdict == retry.Retry {
		if e.backlog != nil {
			r.moveToRetry(e, d.Delay, herr)
		} else if err := e.msg.NakWithDelay(d.Delay); err != nil {
			r.log.Warn("scheduling a retry failed; JetStream will deliver the job again after the ack wait", "job", e.job.ID, "error", err)
		}
		r.observe(Event{Kind: Retrying, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq, Err: herr, Delay: d.Delay, Took: took})
		return
	}
	r.deadLetter(e, e.attempt, d.Reason, herr, took)
}

// moveToRetry moves a failed backlog job to READY with its tries so far
// and a not-before of now+delay, then deletes it from the backlog and acks
// its grant. A job whose downstream pushed back (retry.IsPushback) goes
// back to the backlog instead, at the end of its key's jobs, so that its
// retry starts at the leak's pace like the jobs it came with rather than
// at once from READY; if the backlog refuses it (full), it goes to READY.
// The move's message id is the job's backlog place (placeID), so a worker
// that dies between the move and the delete, and whose successor runs and
// moves the job again, stores it once. If the move fails the grant goes
// back: the job stays in the backlog and starts again after the delay, its
// tries so far forgotten.
func (r *runner) moveToRetry(e *execution, delay time.Duration, herr error) {
	ctx, cancel := settleCtx(r.hctx)
	defer cancel()
	notBefore := time.Now().Add(delay)
	var (
		moved *jetstream.PubAck
		err   error
	)
	if _, pushback := retry.IsPushback(herr); pushback {
		moved, err = queue.RetryMove(e.source(r.cfg.Queue.Name), e.attempt, notBefore, queue.Backlog).Do(ctx, r.js, e.settleSource)
	}
	if moved == nil {
		moved, err = queue.RetryMove(e.source(r.cfg.Queue.Name), e.attempt, notBefore, queue.Ready).Do(ctx, r.js, e.settleSource)
	}
	switch {
	case moved == nil:
		r.log.Error("moving a failed backlog job for its retry failed; it stays in the backlog", "job", e.job.ID, "error", err)
		_ = e.msg.NakWithDelay(delay)
	case err != nil:
		r.log.Warn("failed backlog job moved for its retry but its removal from the backlog failed; it may run once more from the backlog", "job", e.job.ID, "error", err)
	}
}

// deadLetter moves the delivery to DEAD, then acks it. If the store
// fails the job stays where it is and comes back after a short delay.
func (r *runner) deadLetter(e *execution, attempts int, reason string, cause error, took time.Duration) {
	ctx, cancel := settleCtx(r.hctx)
	defer cancel()
	ev := Event{Kind: DeadLettered, Job: e.job, Attempt: attempts, Stream: e.stream, Sequence: e.seq, Err: cause, Reason: reason, Took: took}
	settle := func(ctx context.Context) error {
		r.outcome(ctx, e, ev) // copied to DEAD: the outcome, then the ack
		return e.settleSource(ctx)
	}
	moved, err := queue.DeadMove(e.source(r.cfg.Queue.Name), attempts, reason, cause, time.Now()).Do(ctx, r.js, settle)
	if moved == nil {
		r.log.Error("dead-lettering failed; the job stays where it is and comes back", "stream", e.stream, "stream_seq", e.seq, "error", err)
		_ = e.msg.NakWithDelay(time.Second)
		return
	}
	if err != nil {
		r.log.Error("job dead-lettered but its ack failed; it will be dead-lettered again (stored once)", "stream", e.stream, "stream_seq", e.seq, "error", err)
		return
	}
	r.observe(ev)
}

// outcome hands a READY job's outcome ev to WorkerConfig.Outcome before
// the job is acked; a backlog job's, and a message that is not a job, are
// not handed.
func (r *runner) outcome(ctx context.Context, e *execution, ev Event) {
	if r.cfg.Outcome == nil || e.backlog != nil || ev.Job == nil {
		return
	}
	ev.Queue = r.cfg.Queue.Name
	if err := r.cfg.Outcome(ctx, ev); err != nil {
		r.log.Warn("recording a job's outcome before its ack failed; the job is settled all the same", "job", ev.Job.ID, "error", err)
	}
}

// checkStall warns, at most every 10 s, when the ready consumer delivers
// nothing because every ack-pending slot is taken while jobs wait.
func (r *runner) checkStall(ctx context.Context) {
	r.mu.Lock()
	if time.Since(r.lastStallW) < 10*time.Second {
		r.mu.Unlock()
		return
	}
	r.lastStallW = time.Now()
	r.mu.Unlock()
	ictx, cancel := context.WithTimeout(ctx, requestTimeout) // a lost request must not stall the pull loop
	defer cancel()
	info, err := r.cons.Info(ictx)
	if err != nil {
		return
	}
	if info.NumAckPending >= info.Config.MaxAckPending && info.NumPending > 0 {
		r.log.Warn("ready consumer stalled at max ack pending: jobs running or waiting for a retry hold every slot while others wait; raise max_ack_pending",
			"ack_pending", info.NumAckPending, "max_ack_pending", info.Config.MaxAckPending, "waiting", info.NumPending)
	}
}
