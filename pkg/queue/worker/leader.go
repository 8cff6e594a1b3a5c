package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// leaderDeps are what a leader works with: the drainer hands them over
// when its worker takes the lease.
type leaderDeps struct {
	js    jetstream.JetStream
	queue queue.Config
	drainStreams
	// book books a start ahead, without waiting for it.
	book    func(context.Context) (time.Duration, error)
	pause   *pace.Pauser
	period  time.Duration // one start's share of the leak
	log     *slog.Logger
	observe func(Event)
	// keys are the paused keys, with pushback scope key (nil: none).
	keys *pace.KeyPauses
	// weights are the fairness weights in force (nil: those stamped on
	// the jobs).
	weights *pace.Weights
	// ackWait is the workers' ack wait: a key slot's holder that has not
	// beaten for that long is dead (keycap.go).
	ackWait time.Duration
	// leak is the leak's maximum rate and whether it is adaptive, now
	// (leakOf): a key's cut rate is kept by paceKey.
	leak func() (bucket.Rate, bool)
}

// leader runs a queue's drain while its worker holds the lease. It learns
// the backlog from one consumer of it (follow), headers only, in stream
// order: each job is delivered to it once, and the scheduler holds it
// while its flow's window has room (fairSched.add). A flow whose window
// had none is read by subject when it has (readFlow): such a read costs
// nats-server a scan of every message between two jobs of the flow, so
// it is kept for the flows beyond the scheduler's bound.
type leader struct {
	leaderDeps
	sched  *fairSched
	filter string
	// arrivals hand the backlog's jobs, as the consumer delivers them,
	// from follow to the leader's loop: while it is full, the consumer
	// waits.
	arrivals chan arrival
	// granted are the jobs granted and not yet settled when this leader
	// began: they are not granted again.
	granted map[uint64]bool
	// inflight are the jobs this leader granted, by the grant's sequence,
	// until the grants stream's first is past it (sweepInflight).
	inflight      map[uint64]uint64
	inflightSweep int
	// catching is set while the consumer has yet to deliver what the
	// backlog held when this leader began, up to startLast: nothing is
	// granted from that partial view (caughtUp). indexed are the backlog's
	// subjects then, and heardAt is when the last job was delivered.
	catching  bool
	startLast uint64
	indexed   map[string]uint64
	heardAt   time.Time
	stats     *releaseStats
	// takenAt is when the grants consumer was last seen with fewer than
	// two grants waiting: demand trusts that for demandFresh.
	takenAt time.Time
	// aheadBudget is how many look-ahead reads may be made now, refilled
	// at readAheadRate since aheadAt.
	aheadBudget float64
	aheadAt     time.Time
	// keysSeen is the version of the key pauses the scheduler holds.
	keysSeen uint64
	// keyNext is, per key token whose adaptive rate a pushback cut, when
	// its next start may come (paceKey), unix ns; keyNextSweep is the size
	// at which the past ones are forgotten.
	keyNext      map[string]int64
	keyNextSweep int
	// caps are the key slots' holders, for holding the flows whose
	// concurrency key is at its max (nil: no slots' bucket).
	caps *keyCaps
}

// bookAhead is how many starts ahead of the next one due the leader
// books, so that a grant reaches a worker before its start even when the
// leader or the worker is slow for a moment: a grant taken more than one
// start late is booked again (grantOf), and every late booking is a start
// the leak loses.
const bookAhead = 2

// arrivalsBuffer is how many delivered jobs the consumer and the hand-off
// to the leader's loop may each hold: headers only, some hundred bytes
// each.
const arrivalsBuffer = 256

// catchUpQuiet is how long a leader that has not caught up waits for a
// delivery before it asks the stream whether anything it held at the
// start is left (its jobs may have gone meanwhile).
const catchUpQuiet = 100 * time.Millisecond

// followHeartbeat is the consumer's idle heartbeat: a consumer that has
// not been heard of for twice that (the stream's server restarted, or its
// leader moved) is made again.
const followHeartbeat = time.Second

// demandFresh is how long the leader trusts that its grants are being
// taken before it asks the grants consumer again: at most that much of the
// leak's starts can be granted ahead of the workers.
const demandFresh = 50 * time.Millisecond

func newLeader(deps leaderDeps) *leader {
	l := &leader{
		leaderDeps: deps, sched: newFairSched(deps.queue.Fairness.MinShare), filter: queue.SubjectFilter(deps.queue.Name, queue.Backlog),
		arrivals: make(chan arrival, arrivalsBuffer), granted: make(map[uint64]bool), inflight: make(map[uint64]uint64), inflightSweep: 1024, stats: newReleaseStats(),
		keyNext: make(map[string]int64), keyNextSweep: 64,
	}
	l.holdPausedKeys()
	if deps.drainStreams.keys != nil {
		l.caps = newKeyCaps(deps.queue.Name, deps.ackWait)
	}
	if deps.weights != nil {
		l.sched.weightOf = deps.weights.WeightOf
	}
	return l
}

// run leads until ctx ends.
func (l *leader) run(ctx context.Context) {
	log := l.log
	log.Info("leading the backlog's drain")
	defer log.Info("no longer leading the backlog's drain")
	l.watchCaps(ctx)
	for failures := 0; ctx.Err() == nil; failures++ {
		err := l.index(ctx)
		if err == nil {
			break
		}
		log.Warn("reading the backlog's keys failed; retrying", "error", err, "failures", failures+1)
		_ = loop.Sleep(ctx, loop.Backoff(failures+1))
	}
	if ctx.Err() != nil {
		return
	}
	var follower sync.WaitGroup
	defer follower.Wait()
	follower.Go(func() { l.follow(ctx) })
	go l.publishStats(ctx)
	var pipe chan struct{}
	for ctx.Err() == nil {
		l.take()
		if l.catching && !l.caughtUp(ctx) {
			l.idle(ctx, time.Now())
			continue
		}
		l.read(ctx)
		l.holdKeys()
		l.recheckCaps()
		now := time.Now()
		if !l.sched.peek(now.UnixNano()) {
			l.idle(ctx, now)
			continue
		}
		if l.pause.Paused() {
			// Paused: grant nothing until the resume.
			if l.pause.Wait(ctx) != nil {
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
	wait := time.Second
	if l.sched.mayReadAheadSoon() {
		wait = 100 * time.Millisecond // the look-ahead goes on
	}
	if l.catching {
		wait = min(wait, catchUpQuiet)
	}
	if at, ok := l.sched.nextDue(); ok {
		wait = min(wait, time.Duration(at-now.UnixNano()))
	}
	t := time.NewTimer(max(wait, time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case a := <-l.arrivals:
		l.offer(a)
	case <-l.keys.Changed():
	case <-l.capsChanged():
	case <-ctx.Done():
	}
}

// index reads the jobs granted and not settled, and what the backlog
// holds: its last sequence, which the consumer is to reach before the
// leader grants (caughtUp), and its subjects.
func (l *leader) index(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 4*requestTimeout)
	defer cancel()
	gi, err := l.gstream.Info(rctx)
	if err != nil {
		return err
	}
	for seq := gi.State.FirstSeq; gi.State.Msgs > 0 && seq <= gi.State.LastSeq; {
		m, err := l.gstream.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(queue.GrantSubject(l.queue.Name)))
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
	info, err := l.backlog.Info(rctx, jetstream.WithSubjectFilter(l.filter))
	if err != nil {
		return err
	}
	l.catching = info.State.Msgs > 0
	l.startLast = info.State.LastSeq
	l.indexed = info.State.Subjects
	l.heardAt = time.Now()
	l.log.Debug("backlog indexed", "flows", len(info.State.Subjects), "jobs", info.State.Msgs, "granted", len(l.granted))
	return nil
}

// arrival is a backlog job as the consumer delivered it: its subject, its
// headers as the scheduler sees them, and how many of the backlog's
// messages the consumer had yet to deliver after it.
type arrival struct {
	subject string
	job     pendingJob
	pending uint64
}

// feedConsumer is the consumer of the backlog that the leader follows it
// with. The backlog is a work-queue stream: its consumers ack explicitly
// (an ack would take the job out of it, so this one never acks), deliver
// from its first message, and do not overlap — one name, which a new
// leader takes over from its predecessor by deleting it.
const feedConsumer = "spillway-drain-feed"

// follow hands the backlog's jobs to the leader's loop (arrivals) until
// ctx ends: a consumer of the backlog's subjects, headers only, delivers
// every job in stream order, from the stream's first. A consumer that
// fails is made again, delivering the stream from its first again: the
// loop knows the jobs it holds or was read past (fairSched.add), and the
// jobs granted and not settled (offer).
func (l *leader) follow(ctx context.Context) {
	for failures := 0; ctx.Err() == nil; failures++ {
		err := l.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("following the backlog failed; following it again from its first job", "error", err, "failures", failures+1)
		_ = loop.Sleep(ctx, loop.Backoff(failures+1))
	}
}

// consume hands over the jobs one consumer delivers until it fails or ctx
// ends; the consumer is deleted then.
//
// A delivery can be lost on its way: one sent to this process's
// connection as the server it was connected to went down. The consumer
// counts it delivered all the same, and it never acks, so it would send
// that job again only after feedAckWait; the loop, which takes a job at
// or before its flow's last as known (fairSched.add), would not take it
// then either. So the feed keeps its place (feedPlace): a delivery whose
// consumer sequence skips some, or a quiet feed whose consumer says it
// delivered more than came, has the skipped jobs read from the stream and
// handed over first, in stream order.
func (l *leader) consume(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := l.backlog.DeleteConsumer(rctx, feedConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	c, err := l.backlog.CreateConsumer(rctx, jetstream.ConsumerConfig{
		Name: feedConsumer, Description: "the drain leader's view of the backlog",
		FilterSubject: l.filter, DeliverPolicy: jetstream.DeliverAllPolicy, HeadersOnly: true,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: feedAckWait, MaxDeliver: -1, MaxAckPending: -1,
		InactiveThreshold: feedInactive, MemoryStorage: true,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.backlog.DeleteConsumer(dctx, feedConsumer)
		cancel()
	}()
	it, err := c.Messages(jetstream.PullMaxMessages(arrivalsBuffer), jetstream.PullExpiry(5*followHeartbeat),
		jetstream.PullHeartbeat(followHeartbeat), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var at feedPlace
	for {
		m, err := it.Next(jetstream.NextMaxWait(feedQuiet))
		if errors.Is(err, nats.ErrTimeout) {
			if err := l.feedCheck(ctx, c, &at); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		// Deliveries come in consumer order, one consumer sequence each,
		// redeliveries too; the sequence may go back when the consumer's
		// state lags behind a leader change.
		switch {
		case md.NumDelivered > 1:
			// Delivered again, after feedAckWait: the loop knows it, or
			// takes it. After a skip the place stays, for the next first
			// delivery or a quiet feed to tell what was lost: the stream
			// sequence a redelivery carries says nothing of that.
			if md.Sequence.Consumer <= at.consumer+1 {
				at.consumer = md.Sequence.Consumer
			}
		case md.Sequence.Stream <= at.stream:
			// Handed over already (feedFill, or before a leader change):
			// what a skip before it lost was too, being earlier.
			at.consumer = md.Sequence.Consumer
			continue
		default:
			if md.Sequence.Consumer != at.consumer+1 {
				if err := l.feedFill(ctx, &at, md.Sequence.Consumer-1, md.Sequence.Stream); err != nil {
					return err
				}
			}
			at.consumer, at.stream = md.Sequence.Consumer, md.Sequence.Stream
		}
		if err := l.handOver(ctx, arrival{subject: m.Subject(), job: l.pending(md.Sequence.Stream, m.Headers()), pending: md.NumPending}); err != nil {
			return err
		}
	}
}

// feedPlace is how far the feed has handed the backlog over: the last
// consumer sequence received or read past, and the stream sequence up to
// which every job was handed over.
type feedPlace struct {
	consumer, stream uint64
}

// feedQuiet is how long the feed waits for a delivery before it asks the
// consumer whether it delivered one that never came (feedCheck): longer
// than the two missed heartbeats (followHeartbeat) after which the
// consumer is taken as gone, so that those end the wait first.
const feedQuiet = 3 * time.Second

// feedCheck asks the consumer of a quiet feed how far it delivered: past
// at, the deliveries were lost on their way, and their jobs are read from
// the stream (feedFill).
func (l *leader) feedCheck(ctx context.Context, c jetstream.Consumer, at *feedPlace) error {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	info, err := c.Info(rctx)
	cancel()
	if err != nil {
		return nil // the next quiet spell asks again
	}
	// The consumer's state may lag behind a leader change, its consumer
	// sequence behind what came: the stream sequence it delivered up to
	// tells a loss too.
	if d := info.Delivered; d.Consumer > at.consumer || d.Stream > at.stream {
		return l.feedFill(ctx, at, d.Consumer, d.Stream+1)
	}
	return nil
}

// feedFill hands over the jobs of the stream after at.stream and before
// the stream sequence until, whose deliveries, up to consumer sequence
// delivered, were lost: read by the feed's filter, in stream order. A job
// deleted meanwhile needs no hand-over. A read that fails is tried again
// a few times before the feed is given up (made again, from the first
// job): the reads come when a server went down, and may meet its
// stream's leader election.
func (l *leader) feedFill(ctx context.Context, at *feedPlace, delivered, until uint64) error {
	found := 0
	for seq := at.stream + 1; seq < until; {
		m, err := l.feedRead(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if m.Sequence >= until {
			break
		}
		if err := l.handOver(ctx, arrival{subject: m.Subject, job: l.pending(m.Sequence, m.Header), pending: until - m.Sequence}); err != nil {
			return err
		}
		found++
		seq = m.Sequence + 1
	}
	if found > 0 {
		l.log.Info("the backlog's feed lost deliveries on their way; their jobs were read from the stream",
			"jobs", found, "through_consumer_seq", delivered, "before_stream_seq", until)
	}
	at.consumer, at.stream = max(at.consumer, delivered), max(at.stream, until-1)
	return nil
}

// feedRead reads the feed's first job at or after seq, trying again a few
// times after a failure.
func (l *leader) feedRead(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	for try := 1; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		m, err := l.backlog.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(l.filter))
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || try == feedReadTries || ctx.Err() != nil {
			return m, err
		}
		l.log.Warn("reading a job the backlog's feed lost failed; trying again", "stream_seq", seq, "error", err, "failures", try)
		if err := loop.Sleep(ctx, loop.Backoff(try)); err != nil {
			return nil, err
		}
	}
}

// feedReadTries is how many times feedRead tries a read.
const feedReadTries = 5

// handOver gives a job to the leader's loop, waiting while its hand-off is
// full.
func (l *leader) handOver(ctx context.Context, a arrival) error {
	select {
	case l.arrivals <- a:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// feedAckWait is how long the feed consumer waits before it delivers a
// job again (it never acks one): a job that waits that long in the
// backlog is delivered again, and known (fairSched.add, offer).
const feedAckWait = 24 * time.Hour

// feedInactive is how long the server keeps the feed consumer of a
// leader that stopped pulling from it (it died, or waits for a resume).
const feedInactive = 10 * time.Minute

// take offers the jobs handed over so far, at most a hand-off's worth.
func (l *leader) take() {
	for range arrivalsBuffer {
		select {
		case a := <-l.arrivals:
			l.offer(a)
		default:
			return
		}
	}
}

// offer gives a delivered job to the scheduler, unless it was granted
// and not settled: before this leader began, or by it (a consumer made
// again delivers those again).
func (l *leader) offer(a arrival) {
	l.heardAt = time.Now()
	if l.catching && (a.pending == 0 || a.job.seq >= l.startLast) {
		l.caught("delivered")
	}
	if _, inflight := l.inflight[a.job.seq]; inflight || l.granted[a.job.seq] {
		l.sched.passed(a.job.seq)
		return
	}
	l.sched.add(a.subject, a.job, l.heardAt.UnixNano())
}

// caughtUp reports whether the leader may grant although the consumer has
// not delivered all the backlog held when it began: nothing of that is
// left in the stream (asked after catchUpQuiet without a delivery), or
// the windows hold maxLookahead jobs past their first flowWindow. Then the
// flows that had no room, and those of the subjects not delivered yet,
// are read by subject (readFlow), and the consumer's deliveries of those
// flows are dropped until the reads reach the stream's end.
func (l *leader) caughtUp(ctx context.Context) bool {
	switch {
	case l.sched.beyond >= maxLookahead:
		now := time.Now().UnixNano()
		for subject := range l.indexed {
			if l.sched.flows[subject] == nil {
				f := l.sched.flow(subject)
				f.last, f.more = l.sched.seen, true
				l.sched.place(f, now)
			}
		}
		l.caught("windows full")
	case time.Since(l.heardAt) >= catchUpQuiet:
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		m, err := l.backlog.GetMsg(rctx, l.sched.seen+1, jetstream.WithGetMsgSubject(l.filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence > l.startLast {
			l.caught("nothing left")
			break
		}
		l.heardAt = time.Now()
		return false
	default:
		return false
	}
	return true
}

// caught ends the catching up.
func (l *leader) caught(why string) {
	l.catching, l.indexed = false, nil
	l.log.Debug("backlog caught up", "why", why, "flows", len(l.sched.flows), "seen", l.sched.seen)
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
	for f := range l.sched.readAhead {
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
		m, err := l.backlog.GetMsg(rctx, f.last+1, jetstream.WithGetMsgSubject(f.subject))
		cancel()
		now := time.Now().UnixNano()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			l.sched.exhausted(f, now)
			break
		}
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("reading a backlog key's jobs failed; trying again", "error", err)
			}
			return
		}
		if _, inflight := l.inflight[m.Sequence]; inflight || l.granted[m.Sequence] {
			f.last = m.Sequence
			continue
		}
		l.sched.push(f, l.pending(m.Sequence, m.Header), now)
	}
}

// pending is the backlog message at seq, with headers h, as the
// scheduler sees it.
func (l *leader) pending(seq uint64, h nats.Header) pendingJob {
	j, err := queue.ParseJob(h, nil)
	if err != nil {
		return pendingJob{seq: seq, bad: err}
	}
	due := j.NotBefore
	if due.IsZero() {
		due = j.EnqueuedAt
	}
	p := pendingJob{seq: seq, due: due.UnixNano(), enqueued: j.EnqueuedAt.UnixNano(), weight: max(j.Weight, 1), key: j.Key}
	if len(j.Concurrency) > 0 {
		p.conc, p.id = j.Concurrency, j.ID
	}
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
		info, err := l.grants.Info(rctx)
		cancel()
		if err == nil && info.NumPending <= bookAhead {
			l.takenAt = time.Now()
			return true
		}
		if loop.Sleep(ctx, wait) != nil {
			return false
		}
		if err != nil {
			l.log.Warn("reading the grants consumer failed; trying again", "error", err)
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
	wait, err := l.book(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("booking a backlog start failed; trying again", "error", err)
			_ = loop.Sleep(ctx, time.Second)
		}
		l.sched.putBack(f.subject, j, time.Now().UnixNano())
		return nil
	}
	start := time.Now().Add(wait)
	// A job whose booked start is past its expiry would never run: it
	// goes to DEAD now, and the booking goes to the next job picked (if
	// none is due, it is lost, as any booking not used). So does the
	// booking of a job whose key was paused meanwhile until after it, or
	// whose concurrency key reached its max: the job goes back to its
	// flow, which waits for the pause's end, or for a slot.
	for j.expires != 0 && start.UnixNano() > j.expires || l.keyHeld(f, j, start) || l.keyCapped(f, j) {
		if j.expires != 0 && start.UnixNano() > j.expires {
			l.expire(ctx, f.subject, j, start)
		}
		if f, j, ok = l.sched.pick(time.Now().UnixNano()); !ok {
			return nil
		}
		if l.settled(ctx, f, j, time.Now()) {
			return nil
		}
	}
	q := l.queue
	m := nats.NewMsg(queue.GrantSubject(q.Name))
	m.Header.Set(headerGrantSeq, strconv.FormatUint(j.seq, 10))
	m.Header.Set(headerGrantStart, strconv.FormatInt(start.UnixNano(), 10))
	m.Header.Set(nats.MsgIdHdr, "grant:"+strconv.FormatUint(j.seq, 10))
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	ack, err := l.js.PublishMsg(rctx, m, jetstream.WithExpectStream(queue.GrantsStreamName(q.Name)))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("granting a backlog start failed; trying again", "error", err)
		}
		l.sched.putBack(f.subject, j, time.Now().UnixNano())
		return nil
	}
	l.inflight[j.seq] = ack.Sequence
	if len(l.inflight) >= l.inflightSweep {
		l.sweepInflight(ctx)
	}
	l.stats.add(queue.SubjectToken(f.subject), start)
	l.grantedKeys(f, j, start)
	l.paceKey(f, start)
	next := make(chan struct{})
	time.AfterFunc(time.Until(start)-bookAhead*l.period, func() { close(next) })
	return next
}

// sweepInflight forgets the grants settled: those before the grants
// stream's first (a grant leaves it when a worker acks it). The next sweep
// comes when twice as many are left.
func (l *leader) sweepInflight(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	info, err := l.gstream.Info(rctx)
	cancel()
	if err != nil {
		return
	}
	for seq, g := range l.inflight {
		if g < info.State.FirstSeq {
			delete(l.inflight, seq)
		}
	}
	l.inflightSweep = max(2*len(l.inflight), 1024)
}

// settled dead-letters a picked job that must not start — not a job,
// over the queue's max age, or past its expiry — and reports whether it
// did: such a job takes no start.
func (l *leader) settled(ctx context.Context, f *flow, j pendingJob, now time.Time) bool {
	q := l.queue
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
	l.deadLetter(ctx, subject, j, queue.ReasonExpired, expiredError(time.Unix(0, j.expires), at))
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
	q := l.queue
	raw, err := l.backlog.GetMsg(sctx, j.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // gone already
	}
	if err == nil {
		src := queue.Source{Queue: q.Name, Subject: raw.Subject, Stream: queue.StreamName(q.Name, queue.Backlog), Seq: j.seq, Header: raw.Header, Data: raw.Data}
		_, err = queue.DeadMove(src, 0, reason, cause, time.Now()).Do(sctx, l.js, func(ctx context.Context) error { return queue.RemoveMsg(ctx, l.backlog, j.seq) })
	}
	if err != nil {
		l.log.Error("dead-lettering a backlog job failed; it stays in the backlog", "stream_seq", j.seq, "reason", reason, "error", err)
		l.sched.putBack(subject, j, time.Now().Add(time.Second).UnixNano())
		return
	}
	var job *queue.Job
	if parsed, err := queue.ParseJob(raw.Header, nil); err == nil {
		job = &parsed
	}
	l.observe(Event{Kind: DeadLettered, Job: job, Reason: reason, Stream: queue.StreamName(q.Name, queue.Backlog), Sequence: j.seq,
		Waited: time.Since(time.Unix(0, j.enqueued))})
}
