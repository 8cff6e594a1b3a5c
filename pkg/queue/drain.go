package queue

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/leadership"
	"github.com/spillway-dev/spillway/internal/loop"
)

// How the backlog drains (docs/design.md#fair-drain):
//
//   - One worker process at a time leads a queue's drain (lease). The
//     leader keeps an index of the backlog by flow — a key's jobs of one
//     priority class, one backlog subject — holding a window of each
//     flow's first jobs (headers only), and learns of new jobs by reading
//     the stream after the last one it read, woken by the jobs' own
//     publishes. Its fair scheduler (fairSched) picks the next job.
//   - For each pick it books a start from the Pacer — shared by all
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
//     deleted and not run (cancel.go). A success
//     deletes the backlog message, then acks the grant; a failure that may
//     be retried moves the job to READY (the move's message id is its
//     backlog place, so a crash between the move and the delete stores it
//     once); the last failure dead-letters it.
//   - A worker that dies mid-try leaves the grant unacked: JetStream gives
//     it to another worker after the ack wait, which books a new start and
//     runs the job again (at least once). A grant taken late — every
//     handler was busy — books a new start too, so starts never crowd.
//   - A job older than the queue's MaxAge, a job whose expiry (ExpiresAt)
//     comes before the start it could have, or a message that is not a
//     job, goes to DEAD from the leader, taking no start. A worker that
//     reaches a granted job's start after its expiry dead-letters it too.
//
// The drain's JetStream traffic is per start (a grant, its pull, a get, a
// delete, an ack, and a look at the grants consumer at most every
// demandFresh) plus one get per arriving job; a backlog that waits costs
// nothing but the lease's renewals and idle pulls, whatever its depth.

// requestTimeout bounds one JetStream API request of the drain loop.
const requestTimeout = 5 * time.Second

// Grant headers.
const (
	headerGrantSeq   = "Spillway-Grant-Seq"   // the job's backlog sequence
	headerGrantStart = "Spillway-Grant-Start" // its booked start, unix ns
)

// leaseKey is the entry in the pacer bucket of the lease on queue's drain.
func leaseKey(queue string) string { return queue + ".drain-leader" }

// GrantsConsumer is the durable consumer every worker pulls grants from.
const GrantsConsumer = "spillway-grants"

// GrantsStreamName is the stream of a queue's grants: SPILLWAY_<queue>_GRANTS.
func GrantsStreamName(queue string) string { return "SPILLWAY_" + queue + "_GRANTS" }

// grantsStreamConfig keeps a queue's grants until a worker settles them.
func (c Config) grantsStreamConfig() jetstream.StreamConfig {
	c = c.withDefaults()
	return c.stream(GrantsStreamName(c.Name), "backlog starts granted by the drain's leader", grantSubject(c.Name))
}

type drainer struct {
	w       *Worker
	r       *runner // runs the jobs it starts, in slots shared with READY jobs
	grants  jetstream.Consumer
	backlog jetstream.Stream
	gstream jetstream.Stream
	kv      jetstream.KeyValue // the pacer bucket: the lease
	period  time.Duration      // one start's share of the leak

	mu      sync.Mutex
	waiting map[jetstream.Msg]struct{} // grants taken, not started yet
	starts  sync.WaitGroup
}

func newDrainer(w *Worker, r *runner, grants jetstream.Consumer, backlog, gstream jetstream.Stream, kv jetstream.KeyValue) *drainer {
	return &drainer{
		w: w, r: r, grants: grants, backlog: backlog, gstream: gstream, kv: kv,
		period:  w.cfg.Queue.LeakRate.Per / time.Duration(w.cfg.Queue.LeakRate.Count),
		waiting: make(map[jetstream.Msg]struct{}),
	}
}

// run drains until ctx ends: it leads when it holds the lease, and takes
// grants always. Grants taken and not started are handed back.
func (d *drainer) run(ctx context.Context) {
	var loops sync.WaitGroup
	lease := leadership.NewElector(d.kv, leaseKey(d.w.cfg.Queue.Name), min(max(d.w.cfg.AckWait/2, time.Second), 5*time.Second), d.w.log.Info)
	loops.Go(func() {
		lease.Hold(ctx, func(lctx context.Context) { newLeader(d).run(lctx) })
	})
	d.take(ctx)
	loops.Wait()
	d.starts.Wait()
}

// take pulls grants, one at a time, while a handler slot is free for it.
func (d *drainer) take(ctx context.Context) {
	var failures int
	for ctx.Err() == nil {
		if d.w.pause.Wait(ctx) != nil { // paused: take no grant
			return
		}
		if !d.r.slots.reserve(ctx.Done()) {
			return
		}
		batch, err := d.grants.Fetch(1, jetstream.FetchMaxWait(d.w.cfg.FetchWait))
		got := false
		if err == nil {
			for msg := range batch.Messages() {
				got = true
				seq, start, ok := d.grantOf(ctx, msg)
				if !ok {
					d.r.slots.unreserve()
					continue
				}
				d.mu.Lock()
				d.waiting[msg] = struct{}{}
				d.mu.Unlock()
				d.starts.Go(func() { d.start(ctx, msg, seq, start) })
			}
			err = batch.Error()
		}
		if !got {
			d.r.slots.unreserve()
		}
		if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			failures++
			d.w.log.Warn("pulling backlog grants failed; retrying", "error", err, "failures", failures)
			_ = loop.Sleep(ctx, loop.Backoff(failures))
			continue
		}
		failures = 0
	}
}

// start waits for a grant's booked start and runs its job in the slot
// reserved for it.
// grantOf reads a grant: the job's backlog sequence and its start. A
// grant taken again after a worker died, or taken more than a start's
// share of the leak after its booked start (every handler was busy), has
// its start spent: it is booked anew here, in the order the grants come,
// so that a key's jobs keep their order and starts never crowd. ok is
// false for a grant that was dropped or handed back.
func (d *drainer) grantOf(ctx context.Context, msg jetstream.Msg) (seq uint64, start time.Time, ok bool) {
	seq, err := strconv.ParseUint(msg.Headers().Get(headerGrantSeq), 10, 64)
	at, err2 := strconv.ParseInt(msg.Headers().Get(headerGrantStart), 10, 64)
	if err != nil || err2 != nil {
		d.w.log.Error("a grant names no backlog job; dropped", "seq", msg.Headers().Get(headerGrantSeq), "start", msg.Headers().Get(headerGrantStart))
		_ = msg.Term()
		return 0, time.Time{}, false
	}
	start = time.Unix(0, at)
	meta, _ := msg.Metadata()
	if (meta != nil && meta.NumDelivered > 1) || time.Since(start) > d.period {
		wait, err := d.book(ctx)
		if err != nil {
			d.handBack(msg, time.Second, err)
			return 0, time.Time{}, false
		}
		start = time.Now().Add(wait)
	}
	return seq, start, true
}

// start waits for a grant's start and runs its job in the slot reserved
// for it.
func (d *drainer) start(ctx context.Context, msg jetstream.Msg, seq uint64, start time.Time) {
	defer func() {
		d.mu.Lock()
		delete(d.waiting, msg)
		d.mu.Unlock()
	}()
	stop := heartbeat(msg, d.w.cfg.AckWait/3)
	err := loop.Sleep(ctx, time.Until(start))
	if err == nil && d.paused(ctx) {
		// A pushback came after the start was booked: book again, after
		// the pause.
		var wait time.Duration
		if wait, err = d.w.cfg.Pacer.Reserve(ctx); err == nil {
			err = loop.Sleep(ctx, wait)
		}
	}
	stop()
	if err != nil {
		d.r.slots.unreserve()
		d.handBack(msg, 0, nil) // stopping, or the pacer failed: another start
		return
	}
	if d.w.pause.Paused() {
		// Paused after the start was booked: the grant goes back, and
		// whoever takes it after the resume books a new start.
		d.r.slots.unreserve()
		d.handBack(msg, 0, nil)
		return
	}
	if !d.r.slots.claim() {
		// A READY job took the slot meanwhile: another worker, or this one
		// later, books the job a new start.
		d.handBack(msg, 0, nil)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	raw, err := d.backlog.GetMsg(rctx, seq)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		d.r.slots.put()
		_ = ack(ctx, msg) // settled already, by whoever ran it before
		return
	case err != nil:
		d.r.slots.put()
		d.handBack(msg, time.Second, err)
		return
	}
	e := &execution{
		msg: msg, stream: StreamName(d.w.cfg.Queue.Name, Backlog), seq: seq, subject: raw.Subject,
		header: raw.Header, data: raw.Data, backlog: d.backlog,
	}
	job, err := ParseJob(raw.Header, raw.Data)
	if err != nil {
		d.r.slots.put()
		if e.claim() {
			d.r.deadLetter(e, 0, "invalid job", err, 0)
		}
		return
	}
	if now := time.Now(); !job.ExpiresAt.IsZero() && now.After(job.ExpiresAt) {
		// Granted before its expiry but started after it (a late grant,
		// or one taken again): it never runs.
		d.r.slots.put()
		if e.claim() {
			e.job = &job
			d.r.deadLetter(e, 0, ReasonExpired, expiredError(job.ExpiresAt, now), 0)
		}
		return
	}
	e.job, e.attempt = &job, job.Attempt+1
	if !d.gate(ctx, e) {
		d.r.slots.put()
		return
	}
	d.w.observe(Event{Kind: Released, Job: &job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq, Waited: time.Since(job.EnqueuedAt)})
	d.r.runBacklog(e, job)
}

// booker is a Pacer that can book a start ahead without waiting for it
// (YieldingPacer.Book); pauser tells whether the leak is paused
// (YieldingPacer.PausedUntil).
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
	if b, ok := d.w.cfg.Pacer.(booker); ok {
		return b.Book(ctx)
	}
	return d.w.cfg.Pacer.Reserve(ctx)
}

// paused reports whether the leak is paused now (a pushback came after the
// start was booked): the start is then booked again, after the pause.
func (d *drainer) paused(ctx context.Context) bool {
	p, ok := d.w.cfg.Pacer.(pauser)
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
	if d.w.cfg.StartGate == nil {
		return true
	}
	gctx, cancel := context.WithTimeout(ctx, requestTimeout)
	err := d.w.cfg.StartGate(gctx, Event{Kind: Started, Queue: d.w.cfg.Queue.Name, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	cancel()
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrJobCancelled):
		if e.claim() {
			sctx, cancel := settleCtx(ctx)
			defer cancel()
			if err := e.settleSource(sctx); err != nil {
				d.w.log.Warn("a cancelled backlog job was not removed; its next grant removes it", "job", e.job.ID, "error", err)
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
		d.w.log.Warn("starting a backlog job failed; its grant goes back", "error", cause)
	}
	if err := msg.NakWithDelay(delay); err != nil {
		d.w.log.Warn("handing a backlog grant back failed; it is delivered again after the ack wait", "error", err)
	}
}

// leader runs a queue's drain while its worker holds the lease.
type leader struct {
	d      *drainer
	sched  *fairSched
	filter string
	wake   chan struct{} // a job was published to the backlog
	// granted are the jobs granted and not yet settled when this leader
	// began: they are not granted again.
	granted map[uint64]bool
	next    uint64 // the first backlog sequence the feed has not read
	stats   *releaseStats
	// takenAt is when the grants consumer was last seen with fewer than
	// two grants waiting: demand trusts that for demandFresh.
	takenAt time.Time
	// arrived is set when a job is published to the backlog: the feed
	// reads the stream then, or at feedAt (at most a second later).
	arrived atomic.Bool
	feedAt  time.Time
	// aheadBudget is how many look-ahead reads may be made now, refilled
	// at readAheadRate since aheadAt.
	aheadBudget float64
	aheadAt     time.Time
}

// bookAhead is how many starts ahead of the next one due the leader
// books, so that a grant reaches a worker before its start even when the
// leader or the worker is slow for a moment: a grant taken more than one
// start late is booked again (grantOf), and every late booking is a start
// the leak loses.
const bookAhead = 2

// feedRecheck is how soon the leader reads the backlog again after a
// wake or a read that found jobs, for jobs announced before the stream
// stored them.
const feedRecheck = 20 * time.Millisecond

// demandFresh is how long the leader trusts that its grants are being
// taken before it asks the grants consumer again: at most that much of the
// leak's starts can be granted ahead of the workers.
const demandFresh = 50 * time.Millisecond

func newLeader(d *drainer) *leader {
	q := d.w.cfg.Queue
	return &leader{
		d: d, sched: newFairSched(q.Fairness.MinShare), filter: subjectFilter(q.Name, Backlog),
		wake: make(chan struct{}, 1), granted: make(map[uint64]bool), stats: newReleaseStats(),
	}
}

// run leads until ctx ends.
func (l *leader) run(ctx context.Context) {
	log := l.d.w.log
	log.Info("leading the backlog's drain")
	defer log.Info("no longer leading the backlog's drain")
	sub, err := l.d.w.js.Conn().Subscribe(l.filter, func(*nats.Msg) {
		l.arrived.Store(true)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		log.Error("watching the backlog for new jobs failed; reading it every second instead", "error", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	for failures := 0; ctx.Err() == nil; failures++ {
		if err = l.index(ctx); err == nil {
			break
		}
		log.Warn("reading the backlog's keys failed; retrying", "error", err, "failures", failures+1)
		_ = loop.Sleep(ctx, loop.Backoff(failures+1))
	}
	go l.publishStats(ctx)
	var pipe chan struct{}
	for ctx.Err() == nil {
		if woken := l.arrived.Swap(false); woken || !time.Now().Before(l.feedAt) {
			l.feedAt = time.Now().Add(time.Second)
			if n := l.feed(ctx); woken || n > 0 {
				// A publish reaches the subscription before the stream
				// stores it, and wakes that come together are one: a job
				// announced now may be stored only after this read, even
				// if it found others. Look again soon, and again while
				// the looks find jobs late.
				l.feedAt = time.Now().Add(feedRecheck)
			}
		}
		l.read(ctx)
		now := time.Now()
		if !l.sched.peek(now.UnixNano()) {
			l.idle(ctx, now)
			continue
		}
		if l.d.w.pause.Paused() {
			// Paused: grant nothing until the resume.
			if l.d.w.pause.Wait(ctx) != nil {
				return
			}
			continue
		}
		if !l.demand(ctx) {
			continue
		}
		if pipe != nil {
			select { // book at most bookAhead starts ahead of the next one due
			case <-pipe:
			case <-ctx.Done():
				return
			}
		}
		pipe = l.grantNext(ctx)
	}
}

// idle waits for a job to become due or arrive.
func (l *leader) idle(ctx context.Context, now time.Time) {
	wait := time.Until(l.feedAt) // the feed is read at least every second
	if len(l.sched.ahead) > 0 {
		wait = min(wait, 100*time.Millisecond) // and the look-ahead goes on
	}
	if at, ok := l.sched.nextDue(); ok {
		wait = min(wait, time.Duration(at-now.UnixNano()))
	}
	t := time.NewTimer(max(wait, time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.wake:
	case <-ctx.Done():
	}
}

// index reads which flows the backlog holds and each one's first job;
// the feed reads what arrives after.
func (l *leader) index(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 4*requestTimeout)
	defer cancel()
	gi, err := l.d.gstream.Info(rctx)
	if err != nil {
		return err
	}
	for seq := gi.State.FirstSeq; gi.State.Msgs > 0 && seq <= gi.State.LastSeq; {
		m, err := l.d.gstream.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(grantSubject(l.d.w.cfg.Queue.Name)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if s, err := strconv.ParseUint(m.Header.Get(headerGrantSeq), 10, 64); err == nil {
			l.granted[s] = true
		}
		seq = m.Sequence + 1
	}
	info, err := l.d.backlog.Info(rctx, jetstream.WithSubjectFilter(l.filter))
	if err != nil {
		return err
	}
	l.next = info.State.LastSeq + 1
	now := time.Now().UnixNano()
	for subject := range info.State.Subjects {
		f := l.sched.flow(subject)
		f.more = true
		l.sched.place(f, now)
	}
	l.d.w.log.Debug("backlog indexed", "flows", len(info.State.Subjects), "jobs", info.State.Msgs, "granted", len(l.granted))
	return nil
}

// feed reads the jobs published since the last read, and says how many.
func (l *leader) feed(ctx context.Context) (n int) {
	for ; ctx.Err() == nil; n++ {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		m, err := l.d.backlog.GetMsg(rctx, l.next, jetstream.WithGetMsgSubject(l.filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				l.d.w.log.Warn("reading new backlog jobs failed; trying again", "error", err)
			}
			return
		}
		l.next = m.Sequence + 1
		l.sched.add(m.Subject, l.pending(m), time.Now().UnixNano())
	}
	return n
}

// read fills the windows that need it from the stream, and reads ahead
// for waiting flows within the look-ahead budget.
func (l *leader) read(ctx context.Context) {
	for f := range l.sched.reads {
		l.readFlow(ctx, f, (*flow).needsRead)
	}
	now := time.Now()
	l.aheadBudget = min(l.aheadBudget+now.Sub(l.aheadAt).Seconds()*readAheadRate, readAheadRate)
	l.aheadAt = now
	take := func(f *flow) bool {
		if !f.mayReadAhead() || !l.sched.mayHoldBeyond(f) || l.aheadBudget < 1 {
			return false
		}
		l.aheadBudget--
		return true
	}
	for f := range l.sched.ahead {
		if l.aheadBudget < 1 {
			break
		}
		l.readFlow(ctx, f, take)
	}
}

// readAheadRate bounds the reads per second of jobs behind a waiting
// flow's first ones: a new leader's look at a deep backlog reads each
// flow's first job at once and the rest of its window over time.
const readAheadRate = 100

// readFlow reads f's next jobs while want(f).
func (l *leader) readFlow(ctx context.Context, f *flow, want func(*flow) bool) {
	for want(f) && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		m, err := l.d.backlog.GetMsg(rctx, f.last+1, jetstream.WithGetMsgSubject(f.subject))
		cancel()
		now := time.Now().UnixNano()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			l.sched.exhausted(f, now)
			break
		}
		if err != nil {
			if ctx.Err() == nil {
				l.d.w.log.Warn("reading a backlog key's jobs failed; trying again", "error", err)
			}
			return
		}
		if l.granted[m.Sequence] {
			f.last = m.Sequence
			continue
		}
		l.sched.push(f, l.pending(m), now)
	}
}

// pending is a backlog message as the scheduler sees it.
func (l *leader) pending(m *jetstream.RawStreamMsg) pendingJob {
	j, err := ParseJob(m.Header, nil)
	if err != nil {
		return pendingJob{seq: m.Sequence, bad: err}
	}
	due := j.NotBefore
	if due.IsZero() {
		due = j.EnqueuedAt
	}
	p := pendingJob{seq: m.Sequence, due: due.UnixNano(), enqueued: j.EnqueuedAt.UnixNano(), weight: max(j.Weight, 1)}
	if !j.ExpiresAt.IsZero() {
		p.expires = max(j.ExpiresAt.UnixNano(), 1)
	}
	return p
}

// demand waits until the grants published so far are being taken: at
// most bookAhead wait for a worker. It reports false if the caller should look
// at the backlog again first.
func (l *leader) demand(ctx context.Context) bool {
	if time.Since(l.takenAt) < demandFresh {
		return true
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		info, err := l.d.grants.Info(rctx)
		cancel()
		if err == nil && info.NumPending <= bookAhead {
			l.takenAt = time.Now()
			return true
		}
		if loop.Sleep(ctx, wait) != nil {
			return false
		}
		if err != nil {
			l.d.w.log.Warn("reading the grants consumer failed; trying again", "error", err)
			return false
		}
	}
}

// grantNext picks the next job, books its start and grants it. The
// returned channel closes bookAhead starts before the booked one, when the
// next start may be booked.
func (l *leader) grantNext(ctx context.Context) chan struct{} {
	now := time.Now()
	f, j, ok := l.sched.pick(now.UnixNano())
	if !ok || l.settled(ctx, f, j, now) {
		return nil
	}
	wait, err := l.d.book(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.d.w.log.Warn("booking a backlog start failed; trying again", "error", err)
			_ = loop.Sleep(ctx, time.Second)
		}
		l.sched.putBack(f.subject, j, time.Now().UnixNano())
		return nil
	}
	start := time.Now().Add(wait)
	// A job whose booked start is past its expiry would never run: it
	// goes to DEAD now, and the booking goes to the next job picked (if
	// none is due, it is lost, as any booking not used).
	for j.expires != 0 && start.UnixNano() > j.expires {
		l.expire(ctx, f.subject, j, start)
		if f, j, ok = l.sched.pick(time.Now().UnixNano()); !ok {
			return nil
		}
		if l.settled(ctx, f, j, time.Now()) {
			return nil
		}
	}
	q := l.d.w.cfg.Queue
	m := nats.NewMsg(grantSubject(q.Name))
	m.Header.Set(headerGrantSeq, strconv.FormatUint(j.seq, 10))
	m.Header.Set(headerGrantStart, strconv.FormatInt(start.UnixNano(), 10))
	m.Header.Set(nats.MsgIdHdr, "grant:"+strconv.FormatUint(j.seq, 10))
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	_, err = l.d.w.js.PublishMsg(rctx, m, jetstream.WithExpectStream(GrantsStreamName(q.Name)))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			l.d.w.log.Warn("granting a backlog start failed; trying again", "error", err)
		}
		l.sched.putBack(f.subject, j, time.Now().UnixNano())
		return nil
	}
	l.stats.add(tokenOf(f.subject), start)
	next := make(chan struct{})
	time.AfterFunc(time.Until(start)-bookAhead*l.d.period, func() { close(next) })
	return next
}

// settled dead-letters a picked job that must not start — not a job,
// over the queue's max age, or past its expiry — and reports whether it
// did: such a job takes no start.
func (l *leader) settled(ctx context.Context, f *flow, j pendingJob, now time.Time) bool {
	q := l.d.w.cfg.Queue
	switch {
	case j.bad != nil:
		l.deadLetter(ctx, f.subject, j, "invalid job", j.bad)
	case j.expired(now.UnixNano()):
		l.expire(ctx, f.subject, j, now)
	case q.MaxAge > 0 && now.Sub(time.Unix(0, j.enqueued)) > q.MaxAge:
		waited := now.Sub(time.Unix(0, j.enqueued))
		reason := fmt.Sprintf("expired in backlog (waited %v, max_age %v)", waited.Round(time.Millisecond), q.MaxAge)
		l.deadLetter(ctx, f.subject, j, reason, nil)
	default:
		return false
	}
	return true
}

// expire dead-letters a job that cannot start before its expiry: it has
// come by now, or the start the job could have is at.
func (l *leader) expire(ctx context.Context, subject string, j pendingJob, at time.Time) {
	l.deadLetter(ctx, subject, j, ReasonExpired, expiredError(time.Unix(0, j.expires), at))
}

// expiredError says when a job expired and when it could have started.
func expiredError(expires, at time.Time) error {
	return fmt.Errorf("expires at %s, before the start it could have at %s",
		expires.UTC().Format(time.RFC3339Nano), at.UTC().Format(time.RFC3339Nano))
}

// deadLetter moves a backlog job that will never start to DEAD.
func (l *leader) deadLetter(ctx context.Context, subject string, j pendingJob, reason string, cause error) {
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	q := l.d.w.cfg.Queue
	raw, err := l.d.backlog.GetMsg(sctx, j.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // gone already
	}
	if err == nil {
		dl := deadLetter{
			queue: q.Name, subject: raw.Subject, stream: StreamName(q.Name, Backlog), seq: j.seq,
			header: raw.Header, data: raw.Data, reason: reason, err: cause,
		}
		_, err = dl.store(sctx, l.d.w.js, time.Now(), func(ctx context.Context) error { return deleteMsg(ctx, l.d.backlog, j.seq) })
	}
	if err != nil {
		l.d.w.log.Error("dead-lettering a backlog job failed; it stays in the backlog", "stream_seq", j.seq, "reason", reason, "error", err)
		l.sched.putBack(subject, j, time.Now().Add(time.Second).UnixNano())
		return
	}
	var job *Job
	if parsed, err := ParseJob(raw.Header, nil); err == nil {
		job = &parsed
	}
	l.d.w.observe(Event{Kind: DeadLettered, Job: job, Reason: reason, Stream: StreamName(q.Name, Backlog), Sequence: j.seq,
		Waited: time.Since(time.Unix(0, j.enqueued))})
}

// deleteMsg removes a settled job from the backlog; one removed already
// is fine.
func deleteMsg(ctx context.Context, s jetstream.Stream, seq uint64) error {
	err := s.DeleteMsg(ctx, seq)
	if err == nil {
		return nil
	}
	if _, gerr := s.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}

// releaseStats counts the leader's grants per key token over the last
// minute, in 10-second buckets, for the per-key view (KeyReleases).
type releaseStats struct {
	mu      sync.Mutex
	buckets [6]map[string]int
	at      [6]int64 // each bucket's start, in unix seconds / 10
}

func newReleaseStats() *releaseStats { return &releaseStats{} }

func (s *releaseStats) add(token string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := at.Unix() / 10
	i := int(b % int64(len(s.buckets)))
	if s.at[i] != b || s.buckets[i] == nil {
		s.buckets[i], s.at[i] = make(map[string]int), b
	}
	s.buckets[i][token]++
}

// last is the grants per key over the minute before now, by KeyHash.
func (s *releaseStats) last(now time.Time) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64)
	b := now.Unix() / 10
	for i, m := range s.buckets {
		if b-s.at[i] < int64(len(s.buckets)) {
			for token, n := range m {
				out[hashOfToken(token)] += int64(n)
			}
		}
	}
	return out
}

// hashOfToken is the KeyHash of the key whose KeyToken is token: the
// token's first 64 bits in hex.
func hashOfToken(token string) string {
	b, err := keyEncoding.DecodeString(token)
	if err != nil || len(b) < 8 {
		return token
	}
	return hex.EncodeToString(b[:8])
}

// publishStats writes the last minute's releases per key every 5 s while
// there were any, until ctx ends.
func (l *leader) publishStats(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	empty := true
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		r := KeyReleases{At: time.Now().UTC(), WindowS: 60, Releases: l.stats.last(time.Now())}
		if len(r.Releases) == 0 && empty {
			continue // nothing new to say: an idle queue writes nothing
		}
		empty = len(r.Releases) == 0
		b, err := json.Marshal(r)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err = l.d.kv.Put(rctx, KeyReleasesKey(l.d.w.cfg.Queue.Name), b)
		cancel()
		if err != nil && ctx.Err() == nil {
			l.d.w.log.Debug("publishing the releases per key failed", "error", err)
		}
	}
}
