package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/retry"
)

// runner pulls jobs from the ready consumer, never more than it has free
// handlers for (so no job waits in this process while another worker is
// idle), and runs each with heartbeats until it is settled: acked, nak'd
// for a retry, dead-lettered or handed back.
type runner struct {
	w     *Worker
	cons  jetstream.Consumer
	hctx  context.Context // handlers' context: canceled when the grace period ends
	slots chan struct{}   // a token per running handler

	mu         sync.Mutex
	active     map[*execution]struct{}
	stopping   bool
	idleCh     chan struct{}
	lastStallW time.Time
}

// execution is one delivery of a job being run.
type execution struct {
	msg     jetstream.Msg
	meta    *jetstream.MsgMetadata
	job     *Job
	attempt int

	mu      sync.Mutex
	settled bool
}

func (e *execution) seq() uint64 {
	if e.meta == nil {
		return 0
	}
	return e.meta.Sequence.Stream
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

func newRunner(w *Worker, cons jetstream.Consumer, hctx context.Context) *runner {
	return &runner{
		w: w, cons: cons, hctx: hctx,
		slots:  make(chan struct{}, w.cfg.Concurrency),
		active: make(map[*execution]struct{}),
		idleCh: make(chan struct{}),
	}
}

// pull fetches and starts jobs until ctx ends. The pull request in flight
// when ctx ends is allowed to finish (at most FetchWait), so that no job is
// delivered to this worker and then left unattended.
func (r *runner) pull(ctx context.Context) {
	var failures int
	for ctx.Err() == nil {
		n := r.acquire(ctx)
		if n == 0 {
			return
		}
		batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(r.w.cfg.FetchWait))
		if err != nil {
			r.release(n)
			failures++
			r.w.log.Warn("pulling ready jobs failed; retrying", "error", err, "failures", failures)
			_ = sleep(ctx, backoff(failures))
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			r.start(msg)
		}
		r.release(n - got)
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			failures++
			r.w.log.Warn("pulling ready jobs failed; retrying", "error", err, "failures", failures)
			_ = sleep(ctx, backoff(failures))
			continue
		}
		failures = 0
		if got == 0 {
			r.checkStall(ctx)
		}
	}
}

// acquire waits for one free handler and takes every other free one too.
// It returns 0 when ctx ends first.
func (r *runner) acquire(ctx context.Context) int {
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(r.slots) {
		select {
		case r.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (r *runner) release(n int) {
	for range n {
		<-r.slots
	}
}

func (r *runner) start(msg jetstream.Msg) {
	e := &execution{msg: msg}
	r.mu.Lock()
	r.active[e] = struct{}{}
	r.mu.Unlock()
	go r.execute(e)
}

// finish forgets e and frees its handler.
func (r *runner) finish(e *execution) {
	r.mu.Lock()
	delete(r.active, e)
	if r.stopping && len(r.active) == 0 {
		select {
		case <-r.idleCh:
		default:
			close(r.idleCh)
		}
	}
	r.mu.Unlock()
	r.release(1)
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

// handBackAll gives every unsettled job back to JetStream. Handlers still
// running after their context was canceled are abandoned: whatever they
// return later is ignored.
func (r *runner) handBackAll() {
	r.mu.Lock()
	var left []*execution
	for e := range r.active {
		left = append(left, e)
	}
	r.mu.Unlock()
	for _, e := range left {
		if e.claim() {
			r.handBack(e)
		}
	}
}

func (r *runner) handBack(e *execution) {
	if err := e.msg.Nak(); err != nil {
		r.w.log.Warn("handing a job back failed; JetStream will deliver it again after the ack wait", "error", err)
	}
	r.w.observe(Event{Kind: HandedBack, Job: e.job, Attempt: e.attempt, Sequence: e.seq()})
}

func (r *runner) execute(e *execution) {
	defer r.finish(e)
	meta, err := e.msg.Metadata()
	if err != nil { // not a JetStream delivery: cannot happen on a pull consumer
		r.w.log.Error("a ready delivery has no JetStream metadata", "subject", e.msg.Subject(), "error", err)
		return
	}
	e.meta = meta
	job, err := ParseJob(e.msg.Headers(), e.msg.Data())
	if err != nil {
		if e.claim() {
			r.deadLetter(e, int(meta.NumDelivered), "invalid job", err, 0)
		}
		return
	}
	e.job = &job
	e.attempt = job.Attempt + int(meta.NumDelivered)
	if wait := time.Until(job.NotBefore); wait > 0 {
		// Not due (a clock ahead of ours stamped it): come back when it is.
		if e.claim() {
			if err := e.msg.NakWithDelay(wait); err != nil {
				r.w.log.Warn("deferring a job that is not due failed", "job", job.ID, "error", err)
			}
		}
		return
	}
	if most := r.w.cfg.Retry.Attempts(); e.attempt > most {
		// The worker of the last allowed try stopped before settling it.
		if e.claim() {
			r.deadLetter(e, e.attempt-1, fmt.Sprintf("attempts exhausted (%d of %d; the last try did not finish)", e.attempt-1, most), nil, 0)
		}
		return
	}
	job.Attempt = e.attempt
	r.w.observe(Event{Kind: Started, Job: e.job, Attempt: e.attempt, Sequence: e.seq()})
	stop := heartbeat(e.msg, r.w.cfg.AckWait/3)
	began := time.Now()
	herr := r.call(&job)
	took := time.Since(began)
	stop()
	if e.claim() {
		r.settle(e, herr, took)
	}
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.w.log.Error("handler panicked", "job", j.ID, "attempt", j.Attempt, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.w.handle(r.hctx, j)
}

// settle acks a success, and after a failure naks for a retry or moves the
// job to the dead-letter stream. A failure after the grace period ended is
// the stop's doing, not the job's: the job is handed back.
func (r *runner) settle(e *execution, herr error, took time.Duration) {
	if herr == nil {
		ctx, cancel := settleCtx(r.hctx)
		defer cancel()
		if err := ack(ctx, e.msg); err != nil {
			r.w.log.Error("job succeeded but its ack failed; JetStream will deliver it again", "job", e.job.ID, "error", err)
			return
		}
		r.w.observe(Event{Kind: Succeeded, Job: e.job, Attempt: e.attempt, Sequence: e.seq(), Took: took})
		return
	}
	if r.hctx.Err() != nil {
		r.handBack(e)
		return
	}
	d := r.w.next(e.attempt, herr)
	if d.Verdict == retry.Retry {
		if err := e.msg.NakWithDelay(d.Delay); err != nil {
			r.w.log.Warn("scheduling a retry failed; JetStream will deliver the job again after the ack wait", "job", e.job.ID, "error", err)
		}
		r.w.observe(Event{Kind: Retrying, Job: e.job, Attempt: e.attempt, Sequence: e.seq(), Err: herr, Delay: d.Delay, Took: took})
		return
	}
	r.deadLetter(e, e.attempt, d.Reason, herr, took)
}

// deadLetter stores the delivery in DEAD, then acks it. If the store
// fails the job stays where it is and comes back after a short delay.
func (r *runner) deadLetter(e *execution, attempts int, reason string, cause error, took time.Duration) {
	ctx, cancel := settleCtx(r.hctx)
	defer cancel()
	dl := deadLetter{
		queue: r.w.cfg.Queue.Name, subject: e.msg.Subject(), stream: e.meta.Stream, seq: e.meta.Sequence.Stream,
		header: e.msg.Headers(), data: e.msg.Data(), attempts: attempts, reason: reason, err: cause,
	}
	if err := dl.publish(ctx, r.w.js, time.Now()); err != nil {
		r.w.log.Error("dead-lettering failed; the job stays in READY and comes back", "stream_seq", dl.seq, "error", err)
		_ = e.msg.NakWithDelay(time.Second)
		return
	}
	if err := ack(ctx, e.msg); err != nil {
		r.w.log.Error("job dead-lettered but its ack failed; it will be dead-lettered again (stored once)", "stream_seq", dl.seq, "error", err)
		return
	}
	r.w.observe(Event{Kind: DeadLettered, Job: e.job, Attempt: attempts, Sequence: e.seq(), Err: cause, Reason: reason, Took: took})
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
		r.w.log.Warn("ready consumer stalled at max ack pending: jobs running or waiting for a retry hold every slot while others wait; raise max_ack_pending",
			"ack_pending", info.NumAckPending, "max_ack_pending", info.Config.MaxAckPending, "waiting", info.NumPending)
	}
}

// heartbeat tells JetStream every interval that msg is still being worked
// on, so that AckWait does not hand it to another worker. The returned
// function stops it.
func heartbeat(msg jetstream.Msg, every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = msg.InProgress() // a lost beat is covered by the next one
			case <-done:
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// ack acknowledges msg and waits for JetStream to confirm, trying again a
// few times on a timeout.
func ack(ctx context.Context, msg jetstream.Msg) error {
	var err error
	for try := 1; try <= 3; try++ {
		if err = msg.DoubleAck(ctx); err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		_ = sleep(ctx, backoff(try))
	}
	return err
}

// backoff is the wait after the n-th consecutive failure of a loop:
// 100ms doubling to 5s.
func backoff(n int) time.Duration {
	if n > 6 {
		return 5 * time.Second
	}
	return min(5*time.Second, 100*time.Millisecond<<max(0, n-1))
}
