package queue

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// How the backlog drains (docs/jetstream-backlog.md):
//
//   - Every worker pulls backlog jobs, headers only, and holds them — with
//     heartbeats — until it starts them. The backlog consumer allows the
//     whole backlog to be held at once, so every job is seen by some worker
//     and a job that is not due yet never hides a due one.
//   - A held job is a candidate once it is due (its not-before has passed)
//     and no job of its key ahead of it that this worker holds is due or
//     being released. Candidates go in order of due time.
//   - Before its release a candidate must have no due job of its key ahead
//     of it in the stream (gets of the key's messages from its first), other
//     than jobs this worker is running: so an earlier due job of the key
//     held — or running — in another worker goes first, and per-key FIFO
//     among due jobs holds across processes, while a job that is not due
//     yet holds back nobody.
//   - It then books a start from the Pacer — shared by all workers — and
//     at the booked time starts the job's handler itself, in one of the
//     worker's handler slots (shared with READY jobs), running it from the
//     backlog message: the payload comes with the get above, and the
//     message stays in the backlog, kept with heartbeats, until the try is
//     settled. So a backlog job starts at its booked time, never later in a
//     crowd: handler starts of backlog jobs keep the leak rate over every
//     window, not only moves between streams.
//   - A slot is needed only at the booked start. If one is free when the
//     start is booked, none is held while it waits; if, at the booked time,
//     every handler is busy, the booking is let go unused (starting late
//     could crowd the next booked starts; the pacer's rate is an upper
//     bound) and the job books again. When no slot is free, the drainer
//     takes one before it books, ahead of further READY pulls, so a busy
//     worker still drains its share at the booked times. If none comes
//     within two pull waits, it hands its due jobs back for workers with
//     free handlers and pulls no more backlog jobs until one is free here:
//     held jobs never wait for a busy worker while another is idle.
//   - The try is settled like a READY job's: a success acks the backlog
//     message; a failure that may be retried moves the job to READY with
//     its tries so far and the retry's not-before (Nats-Msg-Id = its backlog
//     stream and sequence, so a crash between the move and the ack stores it
//     once), then acks it in the backlog; the last failure dead-letters it.
//     A crash mid-try leaves the message unacked: after the ack wait it is
//     held again, by some worker, and started again (at least once).
//   - A job older than the queue's MaxAge goes to DEAD instead, taking no
//     start.

// pipeline is how many bookings a worker holds at once: one waiting for
// its time while the next candidate is checked, so that one worker alone
// keeps the pacer's chain of starts unbroken.
const pipeline = 2

// requestTimeout bounds one JetStream API request of the drain loop.
const requestTimeout = 5 * time.Second

// maxBatch bounds one backlog pull.
const maxBatch = 256

type drainer struct {
	w       *Worker
	r       *runner // runs the jobs it starts, in slots shared with READY jobs
	cons    jetstream.Consumer
	stream  jetstream.Stream
	recheck time.Duration // wait before checking again a key held up elsewhere
	maxHeld int

	mu    sync.Mutex
	held  map[uint64]*heldJob   // by backlog sequence
	keys  map[string][]*heldJob // by subject, in sequence order
	heads dueHeap
	wake  chan struct{} // a new candidate may be due sooner
	room  chan struct{} // a held job left
	// running are the backlog jobs (by sequence) this worker started and
	// has not settled: still in the stream, they hold back no job of
	// their key here.
	running map[uint64]bool
	// handedOn: every handler stayed busy and the due jobs went back;
	// no more pulls until a handler is free.
	handedOn bool

	pipe      chan struct{} // a token per booking held
	releasing sync.WaitGroup
}

// heldJob is a backlog job this worker holds.
type heldJob struct {
	msg       jetstream.Msg
	seq       uint64
	subject   string
	job       Job       // from the headers; no payload
	ready     time.Time // the job's own due time: its not-before, or when it was queued
	due       time.Time // when to look at it next: ready, or later after a failed check
	releasing bool
	inHeap    bool
}

func newDrainer(w *Worker, r *runner, cons jetstream.Consumer, stream jetstream.Stream) *drainer {
	period := w.cfg.Queue.LeakRate.Per / time.Duration(w.cfg.Queue.LeakRate.Count)
	return &drainer{
		w: w, r: r, cons: cons, stream: stream,
		recheck: min(max(period, 10*time.Millisecond), time.Second),
		maxHeld: int(w.cfg.Queue.Capacity),
		held:    make(map[uint64]*heldJob),
		keys:    make(map[string][]*heldJob),
		wake:    make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
		running: make(map[uint64]bool),
		pipe:    make(chan struct{}, pipeline),
	}
}

// run drains until ctx ends, then hands every job it holds back.
func (d *drainer) run(ctx context.Context) {
	var loops sync.WaitGroup
	loops.Go(func() { d.fetch(ctx) })
	loops.Go(func() { d.beat(ctx) })
	d.schedule(ctx)
	loops.Wait()
	d.releasing.Wait()
	d.handBackAll()
}

// fetch pulls backlog jobs while this worker holds fewer than maxHeld and,
// after it handed its due jobs on, only once a handler is free.
func (d *drainer) fetch(ctx context.Context) {
	var failures int
	for ctx.Err() == nil {
		d.mu.Lock()
		gated := d.handedOn
		d.mu.Unlock()
		if gated {
			if d.r.slots.room(ctx.Done()) == 0 {
				continue
			}
			d.mu.Lock()
			d.handedOn = false
			d.mu.Unlock()
		}
		d.mu.Lock()
		room := d.maxHeld - len(d.held)
		d.mu.Unlock()
		if room <= 0 {
			select {
			case <-d.room:
			case <-ctx.Done():
			}
			continue
		}
		batch, err := d.cons.Fetch(min(room, maxBatch), jetstream.FetchMaxWait(d.w.cfg.FetchWait))
		if err == nil {
			for msg := range batch.Messages() {
				d.add(ctx, msg)
			}
			err = batch.Error()
		}
		if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			failures++
			d.w.log.Warn("pulling backlog jobs failed; retrying", "error", err, "failures", failures)
			_ = sleep(ctx, backoff(failures))
			continue
		}
		failures = 0
	}
}

// add holds a delivered backlog job.
func (d *drainer) add(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		d.w.log.Error("a backlog delivery has no JetStream metadata", "subject", msg.Subject(), "error", err)
		return
	}
	job, err := ParseJob(msg.Headers(), nil)
	if err != nil {
		d.deadLetter(ctx, msg, meta.Sequence.Stream, "invalid job", err)
		return
	}
	// A job is due at its not-before, or when it was queued if it has
	// none: candidates go in the order they became due.
	due := job.NotBefore
	if due.IsZero() {
		due = job.EnqueuedAt
	}
	h := &heldJob{msg: msg, seq: meta.Sequence.Stream, subject: msg.Subject(), job: job, ready: due, due: due}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running[h.seq] {
		return // delivered again while it runs here (our heartbeats were late): not a second start
	}
	if old := d.held[h.seq]; old != nil {
		// Delivered again (our heartbeats were late): keep the newer
		// delivery's reply subject, and its place.
		old.msg = msg
		return
	}
	d.held[h.seq] = h
	q := d.keys[h.subject]
	i, _ := slices.BinarySearchFunc(q, h.seq, func(x *heldJob, seq uint64) int { return cmp.Compare(x.seq, seq) })
	d.keys[h.subject] = slices.Insert(q, i, h)
	d.pushLocked(h)
}

// pushLocked makes h a candidate and wakes the scheduler.
func (d *drainer) pushLocked(h *heldJob) {
	if h.inHeap {
		return
	}
	h.inHeap = true
	heap.Push(&d.heads, h)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// schedule releases candidates, each at a start booked from the pacer.
func (d *drainer) schedule(ctx context.Context) {
	for {
		select {
		case d.pipe <- struct{}{}:
		case <-ctx.Done():
			return
		}
		h := d.next(ctx)
		if h == nil {
			return
		}
		if !d.tryRelease(ctx, h) {
			<-d.pipe
		}
	}
}

// next waits for a due candidate and takes it from the heap. It returns nil
// when ctx ends.
func (d *drainer) next(ctx context.Context) *heldJob {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		h := d.peekLocked()
		var wait time.Duration
		if h != nil {
			if wait = time.Until(h.due); wait <= 0 {
				heap.Pop(&d.heads)
				h.inHeap = false
				d.mu.Unlock()
				return h
			}
		}
		d.mu.Unlock()
		var tick <-chan time.Time
		if h != nil {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-tick:
		case <-d.wake:
		case <-ctx.Done():
			return nil
		}
	}
}

// peekLocked drops heap entries that are no longer candidates and returns
// the first one that is.
func (d *drainer) peekLocked() *heldJob {
	for d.heads.Len() > 0 {
		h := d.heads[0]
		if d.held[h.seq] == h && !h.releasing && !d.dueAheadLocked(h, time.Now()) {
			return h
		}
		heap.Pop(&d.heads)
		h.inHeap = false
	}
	return nil
}

// dueAheadLocked reports whether a job of h's key ahead of it in the stream,
// held here, is due or on its way: FIFO among a key's due jobs. A job
// ahead that is not due yet does not hold h back. h leaves the candidates
// until that job is gone (forget makes the key's jobs candidates again).
func (d *drainer) dueAheadLocked(h *heldJob, now time.Time) bool {
	for _, x := range d.keys[h.subject] {
		if x == h {
			return false
		}
		if x.releasing || !x.ready.After(now) {
			return true
		}
	}
	return false
}

// maxScanAhead bounds how many earlier jobs of its key a due job's check
// reads from the stream; with more ahead it waits for the key's head.
const maxScanAhead = 64

// dueAheadInStream reports whether a job of h's key before it in the
// stream (held or running in any other worker, or held by none) is due:
// then h waits its turn. Jobs this worker is running already started.
// head is the key's first job in the stream.
func (d *drainer) dueAheadInStream(ctx context.Context, h *heldJob, head *jetstream.RawStreamMsg, now time.Time) (bool, error) {
	m := head
	for range maxScanAhead {
		if m.Sequence >= h.seq {
			return false, nil
		}
		d.mu.Lock()
		started := d.running[m.Sequence]
		d.mu.Unlock()
		if !started {
			j, err := ParseJob(m.Header, nil)
			if err != nil {
				return true, nil // an invalid job ahead: a worker holding it dead-letters it first
			}
			due := j.NotBefore
			if due.IsZero() {
				due = j.EnqueuedAt
			}
			if !due.After(now) {
				return true, nil
			}
		}
		var err error
		if m, err = d.stream.GetMsg(ctx, m.Sequence+1, jetstream.WithGetMsgSubject(h.subject)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// tryRelease checks that no due job of h's key is ahead of it in the stream, books its start
// and starts it in the background at the booked time. It reports whether a
// release is under way (holding a pipeline token).
func (d *drainer) tryRelease(ctx context.Context, h *heldJob) bool {
	if max := d.w.cfg.Queue.MaxAge; max > 0 {
		if waited := time.Since(h.job.EnqueuedAt); waited > max {
			d.expire(ctx, h, waited)
			return false
		}
	}
	// Every handler busy: take the next free one before the checks and the
	// booking, so that the job can start at its booked time. If none comes
	// within handOffAfter, the worker's due jobs go to workers that may
	// have one.
	slot := false
	if !d.r.slots.idle() {
		tctx, cancel := context.WithTimeout(ctx, d.handOffAfter())
		slot = d.r.slots.take(tctx.Done())
		cancel()
		if !slot {
			if ctx.Err() == nil {
				d.handOffDue()
			}
			d.retryLater(h, 0) // stopping: handed back with the rest
			return false
		}
	}
	if !d.book(ctx, h, slot) {
		if slot {
			d.r.slots.put()
		}
		return false
	}
	return true
}

// book checks h's place among its key's due jobs in the stream, books its
// start and releases it in the background. It reports whether it did.
func (d *drainer) book(ctx context.Context, h *heldJob, slot bool) bool {
	// Each check has a deadline of its own: a request lost as a stream
	// leader goes away is never answered, and ctx may have no deadline or
	// a distant one (JetStream's 5s default applies only without one),
	// which would stall the whole backlog behind this job.
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := d.stream.GetMsg(rctx, 1, jetstream.WithGetMsgSubject(h.subject))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		d.forget(h) // gone: another worker released it after our hold lapsed
		return false
	case err != nil:
		if ctx.Err() == nil {
			d.w.log.Warn("reading a backlog key's first job failed; trying again", "job", h.job.ID, "error", err)
			d.retryLater(h, time.Second)
		}
		return false
	case raw.Sequence != h.seq:
		now := time.Now()
		ahead, err := d.dueAheadInStream(rctx, h, raw, now)
		if err == nil && !ahead {
			raw, err = d.stream.GetMsg(rctx, h.seq)
		}
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			d.forget(h)
			return false
		case err != nil:
			if ctx.Err() == nil {
				d.w.log.Warn("reading a backlog key's earlier jobs failed; trying again", "job", h.job.ID, "error", err)
				d.retryLater(h, time.Second)
			}
			return false
		case ahead:
			d.retryLater(h, d.recheck) // an earlier due job of the key goes first
			return false
		}
	}
	wait, err := d.w.cfg.Pacer.Reserve(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.w.log.Warn("booking a backlog start failed; trying again", "job", h.job.ID, "error", err)
			d.retryLater(h, time.Second)
		}
		return false
	}
	d.mu.Lock()
	h.releasing = true
	d.mu.Unlock()
	d.releasing.Go(func() {
		defer func() { <-d.pipe }()
		d.release(ctx, h, raw, wait, slot)
	})
	return true
}

// release waits for h's booked start and starts its handler, in the slot
// it holds or in a free one. With every handler busy at that time the
// booking goes unused and h books again.
func (d *drainer) release(ctx context.Context, h *heldJob, raw *jetstream.RawStreamMsg, wait time.Duration, slot bool) {
	if err := sleep(ctx, wait); err != nil {
		if slot {
			d.r.slots.put()
		}
		d.unrelease(h, 0) // stopping: handed back with the rest
		return
	}
	if !slot && !d.r.slots.tryTake() {
		d.unrelease(h, 0)
		return
	}
	job, err := ParseJob(raw.Header, raw.Data)
	if err != nil { // its headers parsed when it was held; the stored ones are the same
		job = h.job
		job.Payload = raw.Data
	}
	e := &execution{
		stream: StreamName(d.w.cfg.Queue.Name, Backlog), seq: h.seq, subject: h.subject,
		header: raw.Header, data: raw.Data, job: &job, attempt: job.Attempt + 1, backlog: true,
	}
	// From here on the execution keeps the message alive; the next job of
	// its key may be released.
	d.mu.Lock()
	e.msg = h.msg
	d.running[h.seq] = true
	d.mu.Unlock()
	e.done = func() {
		d.mu.Lock()
		delete(d.running, h.seq)
		d.mu.Unlock()
	}
	d.forget(h)
	d.w.observe(Event{Kind: Released, Job: &job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq, Waited: time.Since(job.EnqueuedAt)})
	d.r.runBacklog(e, job)
}

// expire moves a job that waited longer than MaxAge to DEAD.
func (d *drainer) expire(ctx context.Context, h *heldJob, waited time.Duration) {
	reason := fmt.Sprintf("expired in backlog (waited %v, max_age %v)", waited.Round(time.Millisecond), d.w.cfg.Queue.MaxAge)
	if d.deadLetter(ctx, h.msg, h.seq, reason, nil) {
		d.forget(h)
		d.w.observe(Event{Kind: DeadLettered, Job: &h.job, Reason: reason, Waited: waited})
		return
	}
	d.retryLater(h, time.Second)
}

// deadLetter moves backlog message seq, read in full, to DEAD and acks
// it. It reports success.
func (d *drainer) deadLetter(ctx context.Context, msg jetstream.Msg, seq uint64, reason string, cause error) bool {
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	raw, err := d.stream.GetMsg(sctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true // already gone
	}
	if err == nil {
		dl := deadLetter{
			queue: d.w.cfg.Queue.Name, subject: raw.Subject, stream: StreamName(d.w.cfg.Queue.Name, Backlog), seq: seq,
			header: raw.Header, data: raw.Data, reason: reason, err: cause,
		}
		_, err = dl.store(sctx, d.w.js, time.Now(), func(ctx context.Context) error { return ack(ctx, msg) })
	}
	if err != nil {
		d.w.log.Error("dead-lettering a backlog job failed; it stays in the backlog", "stream_seq", seq, "reason", reason, "error", err)
		return false
	}
	return true
}

// retryLater makes h a candidate again after wait.
func (d *drainer) retryLater(h *heldJob, wait time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[h.seq] != h {
		return
	}
	if t := time.Now().Add(wait); t.After(h.due) {
		h.due = t
	}
	d.pushLocked(h)
}

// unrelease returns a job whose release did not happen to the candidates.
func (d *drainer) unrelease(h *heldJob, wait time.Duration) {
	d.mu.Lock()
	h.releasing = false
	d.mu.Unlock()
	d.retryLater(h, wait)
}

// forget drops h; the next job of its key becomes a candidate.
func (d *drainer) forget(h *heldJob) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[h.seq] != h {
		return
	}
	delete(d.held, h.seq)
	q := slices.DeleteFunc(d.keys[h.subject], func(x *heldJob) bool { return x == h })
	if len(q) == 0 {
		delete(d.keys, h.subject)
	} else {
		d.keys[h.subject] = q
		for _, x := range q { // those it held back are candidates again
			d.pushLocked(x)
		}
	}
	select {
	case d.room <- struct{}{}:
	default:
	}
}

// beat sends heartbeats for every held job every AckWait/3.
func (d *drainer) beat(ctx context.Context) {
	t := time.NewTicker(d.w.cfg.AckWait / 3)
	defer t.Stop()
	var msgs []jetstream.Msg
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		msgs = msgs[:0]
		d.mu.Lock()
		for _, h := range d.held {
			msgs = append(msgs, h.msg)
		}
		d.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress() // a lost beat is covered by the next one
		}
	}
}

// handOffAfter is how long the drainer waits for a free handler before it
// hands its due jobs on. Longer than a pull's wait, so that this worker's
// pull in flight has ended and the jobs go to another worker's.
func (d *drainer) handOffAfter() time.Duration {
	return 2 * d.w.cfg.FetchWait
}

// handOffDue naks the held jobs that are due and not being released, so
// that workers with free handlers start them, and stops pulling until a
// handler here is free. Jobs not due yet stay: they hold back nobody.
func (d *drainer) handOffDue() {
	now := time.Now()
	d.mu.Lock()
	d.handedOn = true
	var due []*heldJob
	for _, h := range d.held {
		if !h.releasing && !h.ready.After(now) {
			due = append(due, h)
		}
	}
	d.mu.Unlock()
	for _, h := range due {
		d.mu.Lock()
		msg := h.msg
		d.mu.Unlock()
		d.forget(h) // first: a delivery back to this worker is then held anew
		if err := msg.Nak(); err != nil {
			d.w.log.Warn("handing a due backlog job on failed; it is delivered again after the ack wait", "job", h.job.ID, "error", err)
		}
	}
	if len(due) > 0 {
		d.w.log.Debug("every handler stayed busy: due backlog jobs handed on to other workers", "jobs", len(due), "waited", d.handOffAfter())
	}
}

// handBackAll naks every held job, so other workers get them at once.
func (d *drainer) handBackAll() {
	d.mu.Lock()
	left := make([]*heldJob, 0, len(d.held))
	for _, h := range d.held {
		left = append(left, h)
	}
	clear(d.held)
	clear(d.keys)
	d.heads = d.heads[:0]
	d.mu.Unlock()
	for _, h := range left {
		if err := h.msg.Nak(); err != nil {
			d.w.log.Warn("handing a backlog job back failed; it is delivered again after the ack wait", "job", h.job.ID, "error", err)
		}
	}
}

// dueHeap orders candidates by due time, then by backlog sequence.
type dueHeap []*heldJob

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(*heldJob)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}
