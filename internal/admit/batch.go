package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// idemConcurrency bounds a batch's idempotency records read or written at
// once.
const idemConcurrency = 64

// MaxBatch bounds the jobs of one batch submission.
const MaxBatch = spillway.MaxBatchJobs

// BatchResult is one job's outcome in a batch: an Answer, or Err (an
// *Error) as Submit would have returned for it.
type BatchResult struct {
	Answer Answer
	Err    error
}

// A batch (docs/design.md#batches) is decided and stored job by job, in
// order, with the answers single submissions of the same jobs, one after
// the other, would get from the same state: job i+1 is decided on the
// state job i left, including its refund when the backlog refused it. The
// work is done in segments, each:
//
//  1. claims the idempotency keys of its jobs (concurrently). A key seen
//     earlier in the batch starts a new segment, so that its first job is
//     settled before the key is claimed again, as for singles; so does a
//     job with a max-wait, whose start in the backlog is estimated from
//     the backlog's depth, which must hold the jobs before it;
//  2. decides its jobs in order in one store call (bucket.BatchStore: a
//     Redis round trip per 64 jobs);
//  3. reads how full READY and the backlog are (queue.ReadRoom) and
//     counts the jobs each stream receives, with those that this
//     admitter's other batches are publishing. When every bound holds
//     them all, no publish can be refused: all are pipelined at once, in
//     order. Otherwise the jobs a stream may refuse are publishing
//     barriers: the jobs up to the next barrier are pipelined, and the
//     barrier's answer is awaited before the next are sent. A barrier the
//     stream refused gives its units back (as a single submission's); the
//     decisions after it, taken on the state that still held its units,
//     are given back in reverse order (a refund right after its decision
//     restores the state exactly) and decided again in the next segment,
//     which starts small (one job) and doubles while nothing is refused.
//     A job whose units are given back before its publish (stage's
//     refusals) ends the segment the same way.
//
// So a backlog with room costs one decision round trip and one pipelined
// run of publishes per segment; a backlog at its bound costs a round trip
// per job that may be refused, as singles do. What the room check cannot
// see — another admitter, or a single submission, storing between the
// check and the publishes — may refuse a publish that was sent with later
// ones: the refused job's units are given back then, and the later jobs
// keep the answers they got.
//
// Each decision round trip reads the store's clock once (Redis TIME), so
// the jobs of a segment share one decision time, where singles would each
// have their own.

// SubmitBatch decides and stores jobs for queue name, in order, and returns
// one result per job. The error is for the batch as a whole: an unknown
// queue, or more than MaxBatch jobs.
func (a *Admitter) SubmitBatch(ctx context.Context, name string, reqs []*Request) ([]BatchResult, error) {
	cfg := a.cfg.Load()
	q := cfg.Queue(name)
	if q == nil {
		return nil, &Error{Type: spillway.ProblemNotFound, Detail: fmt.Sprintf("no queue %.80q", name)}
	}
	if len(reqs) > MaxBatch {
		return nil, &Error{Type: spillway.ProblemTooLarge, Detail: fmt.Sprintf("a batch of %d jobs: want at most %d", len(reqs), MaxBatch)}
	}
	// b.q is the queue as its enforcing tiers see it; b.full has the
	// shadow tiers too (shadow.go).
	b := &batch{a: a, q: enforcing(q), full: q, start: time.Now(), res: make([]BatchResult, len(reqs)), jobs: make([]batchJob, len(reqs))}
	// The batch's job ids, made together so that their status records
	// can be written together (jobstatus); a job whose idempotency key
	// was claimed before keeps the id of that claim. Without them (no
	// randomness), each job makes its own.
	b.ids, _ = queue.NewJobIDs(q.Name, len(reqs))
	for i, r := range reqs {
		r.Queue = q.Name
		j := &b.jobs[i]
		j.r = r
		c, err := check(b.full, b.q, r, a.o.Now)
		if err != nil {
			b.fail(i, err)
			continue
		}
		if c.late > 0 {
			// Too late whatever the tiers say: answered now, as a
			// duplicate is, nothing asked and nothing taken.
			ans := waitTooLong(Answer{}, b.q.Name, c.late)
			b.res[i] = BatchResult{Answer: ans}
			j.done = true
			b.decided(string(ans.Reply.Status), reason(ans), time.Since(b.start))
			continue
		}
		j.tiers, j.jobKey, j.cost, j.notBefore = c.tiers, c.jobKey, c.cost, c.notBefore
		if a.o.Idempotency != nil {
			j.idem = r.IdempotencyKey
		}
	}
	b.run(ctx)
	if a.o.OnBatchStored != nil && len(b.stored) > 0 {
		a.o.OnBatchStored(b.stored)
	}
	return b.res, nil
}

// batch is one SubmitBatch under way.
type batch struct {
	a      *Admitter
	q      *config.Queue // its enforcing tiers
	full   *config.Queue // with its shadow tiers
	start  time.Time
	res    []BatchResult
	jobs   []batchJob
	ids    []string    // the jobs' ids, by index (nil: made one by one)
	stored []StoredJob // the jobs stored, in order
}

// batchJob is one job of a batch.
type batchJob struct {
	r      *Request
	tiers  []bucket.Tier
	jobKey string
	cost   int64
	// notBefore is when its schedule lets it start (zero: at once).
	notBefore time.Time
	idem      string // the idempotency key, if the admitter keeps them
	claim     *claim
	done      bool
}

// fail ends job i with err, counted as Submit counts it.
func (b *batch) fail(i int, err error) {
	b.res[i] = BatchResult{Err: err}
	b.jobs[i].done = true
	b.decided("error", errorReason(err), time.Since(b.start))
}

// answer ends job i with (ans, err), as Submit ends a submission: its
// shadow tiers, if the queue has any, are decided then, in the batch's
// order.
func (b *batch) answer(ctx context.Context, i int, ans Answer, err error) {
	j := &b.jobs[i]
	if err == nil {
		ans.RateLimit = rateLimitOf(b.q, ans)
		ans.Shadow = b.a.decideShadow(ctx, b.full, j.r, j.cost, ans)
	}
	b.res[i] = BatchResult{Answer: ans, Err: err}
	j.done = true
	if err == nil {
		b.decided(string(ans.Reply.Status), reason(ans), time.Since(b.start))
	} else {
		b.decided("error", errorReason(err), time.Since(b.start))
	}
}

func (b *batch) run(ctx context.Context) {
	size := MaxBatch
	for i := 0; i < len(b.jobs); {
		// The segment [i, end): up to size jobs to decide, ending before
		// an idempotency key the segment holds already, or before a job
		// with a max-wait.
		seen := map[string]bool{}
		end, live := i, 0
		for end < len(b.jobs) && live < size {
			j := &b.jobs[end]
			if !j.done {
				if j.r.Schedule.MaxWait != nil && live > 0 {
					// Its start in the backlog is estimated from the
					// backlog as it is (backlogStart): the jobs before it
					// must be stored first, as for singles.
					break
				}
				if j.idem != "" {
					if seen[j.idem] {
						break
					}
					seen[j.idem] = true
				}
				live++
			}
			end++
		}
		b.claim(ctx, i, end)
		next := b.segment(ctx, i, end)
		b.settle(i, next)
		if next < end {
			size = 1
		} else {
			size = min(2*size, MaxBatch)
		}
		i = next
	}
}

// claim claims the idempotency keys of jobs [lo, hi) that have none yet;
// a key already answered answers its job as a duplicate.
func (b *batch) claim(ctx context.Context, lo, hi int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, idemConcurrency)
	for i := lo; i < hi; i++ {
		j := &b.jobs[i]
		if j.done || j.idem == "" || j.claim != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var id string // the batch's id for the job, if the key is new
			if b.ids != nil {
				id = b.ids[i]
			}
			c, first, err := b.a.o.Idempotency.Claim(ctx, j.r.Caller, b.q.Name, j.idem, id, requestSum(b.full, j.r))
			switch {
			case err != nil:
				b.res[i] = BatchResult{Err: claimError(j.idem, err)}
			case first != nil:
				first.Reply.Duplicate = true
				b.res[i] = BatchResult{Answer: *first}
			default:
				j.claim = c
			}
		}()
	}
	wg.Wait()
	for i := lo; i < hi; i++ {
		j := &b.jobs[i]
		if j.done || j.idem == "" || j.claim != nil {
			continue
		}
		j.done = true
		if err := b.res[i].Err; err != nil {
			b.decided("error", errorReason(err), time.Since(b.start))
		} else {
			b.decided("duplicate", "idempotency", time.Since(b.start))
		}
	}
}

// settle records the answers of the claimed jobs of [lo, hi) that are done.
func (b *batch) settle(lo, hi int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, idemConcurrency)
	for i := lo; i < hi; i++ {
		j := &b.jobs[i]
		if j.claim == nil || !j.done {
			continue
		}
		c := j.claim
		j.claim = nil
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			b.a.o.Idempotency.Settle(c, b.res[i].Answer, b.res[i].Err)
		}()
	}
	wg.Wait()
}

// segment decides and stores the jobs of [lo, hi) not yet done. It returns
// hi, or the index after a job whose refusal undid the decisions after it
// (those jobs are not done: the next segment decides them again).
func (b *batch) segment(ctx context.Context, lo, hi int) int {
	var idx []int
	jobs := make([]bucket.Job, 0, hi-lo)
	for i := lo; i < hi; i++ {
		if j := &b.jobs[i]; !j.done {
			idx = append(idx, i)
			jobs = append(jobs, bucket.Job{Tiers: j.tiers, Cost: j.cost})
		}
	}
	if len(idx) == 0 {
		return hi
	}
	ds, src, err := b.a.o.Store.DecideBatchFrom(ctx, b.q.Name, jobs)
	if err != nil {
		for k, i := range idx {
			var d bucket.Decision
			if k < len(ds) {
				d = ds[k]
			}
			b.answer(ctx, i, Answer{}, decideError(err, d, jobs[k].Cost))
		}
		return hi
	}
	// Stage every job. Those the tiers rejected are answered in their
	// turn below: a refusal before them would have them decided again.
	type staged struct {
		i   int
		p   *placing
		err error // stage failed (and gave the units back)
	}
	run := make([]staged, 0, len(idx))
	var toReady, toBacklog int64
	next := hi
	for k, i := range idx {
		j := &b.jobs[i]
		id := ""
		switch {
		case j.claim != nil:
			id = j.claim.id
		case b.ids != nil:
			id = b.ids[i]
		}
		p, err := b.a.stage(ctx, b.q, j.r, j.tiers, j.jobKey, j.cost, id, j.notBefore, ds[k], src)
		if p != nil && b.ids != nil && id == b.ids[i] {
			// One of the ids this batch made: its status record is
			// written with theirs (OnBatchStored). A job that took over
			// an earlier submission's id (its idempotency key's) is
			// reported alone, so that no two batches write one group.
			p.inBatch = true
		}
		run = append(run, staged{i, p, err})
		switch {
		case err != nil || p.j == nil:
		case p.dest == queue.Ready:
			toReady++
		default:
			toBacklog++
		}
		if p != nil && p.refunded && p.ans.Decision.Consumed != 0 && k < len(idx)-1 {
			// Staging gave this job's units back: the decisions after
			// it counted them. Give theirs back, last first, and decide
			// them again in the next segment.
			for m := len(idx) - 1; m > k; m-- {
				b.a.refund(ctx, b.q.Name, ds[m])
			}
			next = i + 1
			break
		}
	}
	barrier := b.barriers(ctx, toReady, toBacklog)
	defer b.a.batches.release(b.q.Name, toReady, toBacklog)

	maxPayload := int64(1 << 62)
	if nc := b.a.o.JS.Conn(); nc != nil {
		maxPayload = nc.MaxPayload()
	}
	type sent struct {
		staged
		t   *queue.InFlight
		err error
	}
	var pipe []sent
	for k, s := range run {
		isBarrier := k == len(run)-1
		switch {
		case s.err != nil || s.p.j == nil:
			pipe = append(pipe, sent{staged: s})
		default:
			// A payload within 4 KiB of the server's max_payload may be
			// refused (the job's headers count too): a barrier, as a
			// stream that may be full is.
			isBarrier = isBarrier || barrier(s.p.dest) || int64(len(s.p.r.Payload))+4096 > maxPayload
			t, err := b.a.o.Publisher.Begin(ctx, s.p.dest, s.p.j)
			pipe = append(pipe, sent{s, t, err})
		}
		if !isBarrier {
			continue
		}
		// Await what was sent, in order, and answer it.
		refused := false
		for _, x := range pipe {
			if x.staged.err != nil {
				b.answer(ctx, x.i, Answer{}, x.staged.err)
				continue
			}
			if x.p.j == nil {
				b.answer(ctx, x.i, x.p.ans, nil)
				continue
			}
			stored, err := queue.Stored{}, x.err
			if x.t != nil {
				stored, err = x.t.Wait(ctx)
			}
			ans, err := b.a.finish(ctx, x.p, stored, err)
			b.answer(ctx, x.i, ans, err)
			if x.p.inBatch && x.p.stored != nil {
				b.stored = append(b.stored, *x.p.stored)
			}
			refused = refused || refundedBy(x.p, ans, err)
		}
		pipe = pipe[:0]
		if refused && k < len(run)-1 {
			// The decisions after the refused job counted its units:
			// give theirs back, last first, and decide them again.
			for m := len(run) - 1; m > k; m-- {
				if r := run[m]; r.err == nil {
					b.a.refund(ctx, b.q.Name, r.p.ans.Decision)
				}
			}
			return run[k].i + 1
		}
	}
	return next
}

// refundedBy reports whether finishing p gave its units back: the stream
// refused it (or it was too large) after the tiers had taken them.
func refundedBy(p *placing, ans Answer, err error) bool {
	if p.ans.Decision.Consumed == 0 {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Type == spillway.ProblemTooLarge
	}
	return err == nil && ans.Reply.Status == spillway.Rejected
}

// barriers reserves room for a segment's publishes and returns which
// destinations may refuse one of them: all of them when the room cannot
// be read.
func (b *batch) barriers(ctx context.Context, toReady, toBacklog int64) func(queue.Destination) bool {
	otherReady, otherBacklog := b.a.batches.reserve(b.q.Name, toReady, toBacklog)
	room, err := queue.ReadRoom(ctx, b.a.o.JS, b.q.Name)
	if err != nil {
		return func(queue.Destination) bool { return true }
	}
	readySafe := room.Fits(toReady+otherReady, 0)
	// A job READY refuses goes to the backlog: count it there too.
	backlogMore := toBacklog + otherBacklog
	if !readySafe {
		backlogMore += toReady + otherReady
	}
	backlogSafe := room.Fits(0, backlogMore)
	return func(d queue.Destination) bool {
		if d == queue.Ready {
			return !readySafe
		}
		return !backlogSafe
	}
}

// reservations counts, per queue, the publishes this admitter's batches
// are making, so that concurrent batches see each other in their room
// checks.
type reservations struct {
	mu sync.Mutex
	m  map[string]*[2]int64 // READY, backlog
}

// reserve adds a segment's publishes and returns those of the others.
func (r *reservations) reserve(q string, ready, backlog int64) (int64, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*[2]int64{}
	}
	c := r.m[q]
	if c == nil {
		c = new([2]int64)
		r.m[q] = c
	}
	or, ob := c[0], c[1]
	c[0] += ready
	c[1] += backlog
	return or, ob
}

func (r *reservations) release(q string, ready, backlog int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.m[q]; c != nil {
		c[0] -= ready
		c[1] -= backlog
		if c[0] == 0 && c[1] == 0 {
			delete(r.m, q)
		}
	}
}

// DecideBatchFrom decides jobs of one group in order, as DecideFrom would
// one after the other: in one call of the primary store when it is a
// bucket.BatchStore; under a failure mode, per job as the mode says.
func (f *Failover) DecideBatchFrom(ctx context.Context, group string, jobs []bucket.Job) ([]bucket.Decision, Source, error) {
	if f.primary == nil {
		_, local := f.state()
		ds, err := local.DecideBatch(ctx, group, jobs)
		return ds, FromPrimary, err
	}
	return viaPrimary(ctx, f,
		func() ([]bucket.Decision, error) {
			ds, err := decideBatch(ctx, f.primary, group, jobs)
			if err != nil {
				return nil, err
			}
			return ds, nil
		},
		func() ([]bucket.Decision, Source, error) { return f.fallbackBatch(ctx, group, jobs) })
}

// decideBatch decides jobs in s in order: in one call if s is a
// bucket.BatchStore, else one Decide per job.
func decideBatch(ctx context.Context, s bucket.Store, group string, jobs []bucket.Job) ([]bucket.Decision, error) {
	if bs, ok := s.(bucket.BatchStore); ok {
		return bs.DecideBatch(ctx, group, jobs)
	}
	ds := make([]bucket.Decision, len(jobs))
	for i := range jobs {
		d, err := s.Decide(ctx, group, jobs[i].Tiers, jobs[i].Cost)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		ds[i] = d
	}
	return ds, nil
}

// fallbackBatch is fallback for every job of a batch. Under failure mode
// closed every decision carries the Retry-After.
func (f *Failover) fallbackBatch(ctx context.Context, group string, jobs []bucket.Job) ([]bucket.Decision, Source, error) {
	ds := make([]bucket.Decision, len(jobs))
	var src Source
	for i := range jobs {
		d, s, err := f.fallback(ctx, group, jobs[i].Tiers, jobs[i].Cost)
		if err != nil {
			for k := range ds {
				ds[k].RetryAfter = d.RetryAfter
			}
			return ds, s, err
		}
		ds[i], src = d, s
	}
	return ds, src, nil
}

// decided reports a Decided event for a job of the batch.
func (b *batch) decided(verdict, reason string, took time.Duration) {
	b.a.decided(b.full.Name, verdict, reason, took)
}
