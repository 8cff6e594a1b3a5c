// Package admit is the admission core behind both front doors: it turns a
// submission into a verdict over the queue's limit tiers, stores the job in
// READY or the backlog, and answers only once JetStream has stored it.
//
// # A submission
//
//  1. An idempotency key (Idempotency-Key, or Nats-Msg-Id on the NATS door)
//     is claimed in a JetStream KV bucket shared by every admitter; a retry
//     with the same key gets the first answer and takes nothing.
//  2. The tiers decide (bucket.Store, through Failover for the failure mode).
//  3. Admitted jobs go to READY — or, when READY holds its capacity, to
//     the backlog; queued and excess ones to the backlog. JetStream
//     enforces every bound. A backlog that refuses gives the job's units
//     back (bucket refund) and the answer is rejected with the time until
//     a place frees (retryafter.go). Either way the job carries the
//     submission's priority class and its key's fairness weight, for the
//     backlog's drain; neither changes the verdict.
//  4. A debounced job (Spillway-Debounce), stored in the backlog, becomes
//     its group's newest and supersedes the one that was (debounce.go).
package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// MaxKeyLen bounds a client key read from a header: longer keys are
// refused (400), so a client cannot make the admitter hash megabytes.
const MaxKeyLen = 1024

// MaxIdempotencyKeyLen bounds an idempotency key.
const MaxIdempotencyKeyLen = 256

// Request is one submission as a front door hands it over, its headers
// read into typed values: the door has refused what it could not read,
// and Submit decides on the values as given.
type Request struct {
	Queue   string
	Payload []byte
	// Keys looks up the value of a header by name, in any case, for the
	// header:NAME tiers: which headers key a job is the queue's
	// configuration, read when the job is decided. A key is opaque, used
	// as given; nil means no headers.
	Keys func(header string) string
	// Peer is the client address for ip tiers (the HTTP door resolves
	// X-Forwarded-For from trusted proxies); empty on the NATS door.
	Peer string
	// NoPeer says the door knows no client address (the NATS door): a
	// queue with an ip tier refuses the request (bad-key).
	NoPeer bool
	// Cost in units, ≥ 1 (Spillway-Cost; 0 means 1).
	Cost int64
	// Priority is the job's class in the backlog's drain: High, Normal
	// or Low (Spillway-Priority; zero: Normal). It orders the drain only:
	// the tiers decide the same whatever the class.
	Priority spillway.Priority
	// IdempotencyKey, if set, makes the submission idempotent across doors
	// and admitters.
	IdempotencyKey string
	// Trace headers to carry with the job (traceparent, tracestate).
	Trace nats.Header
	// Schedule is the job's timing (zero: none).
	Schedule Schedule
	// DebounceKey (Spillway-Debounce-Key) groups a debounced job
	// (Schedule.Debounce) with the jobs it supersedes and is superseded
	// by; empty: the job's limit key (debounce.go).
	DebounceKey string
	// Caller is who submits: the fingerprint of the API key the door
	// took the submission with ("" without API keys). It is stamped on
	// the job as spillway.HeaderSubmitter, and scopes the idempotency key.
	Caller string
}

// Answer is the outcome of a submission that was decided.
type Answer struct {
	Reply spillway.SubmitReply
	// Decision is the enforcing tiers' decision (zero for a duplicate);
	// its Tier indexes the queue's enforcing tiers, shadow tiers left out.
	Decision bucket.Decision
	// Limit is the tier that bounds the answer, for rate-limit headers
	// (invalid for a duplicate).
	Limit bucket.Limit
	// Source says which store decided.
	Source Source
	// Refunded is how many units the bounding tier got back because the
	// backlog refused the job (Decision.Remaining does not count them).
	Refunded int64
	// RateLimit is what the answer says about the limits, for rate-limit
	// headers: the first answer's for a duplicate; nil when no tier took
	// part (a job refused as wait-too-long before the tiers decided).
	RateLimit *RateLimit
	// ReadyFull: the tiers admitted the job but READY was full, so it was
	// queued in the backlog (or refused when that was full too).
	ReadyFull bool
	// Shadow is what the queue's shadow tiers would have done with the
	// job, in the order of its limits: nil for a job the enforcing tiers
	// or the backlog refused, and for a duplicate (shadow.go).
	Shadow []ShadowDecision
	// Scheduled: the job waits for its own Spillway-Not-Before or
	// Spillway-Delay, later than any tier's not-before.
	Scheduled bool
}

// Error is a submission that could not be decided or stored. Type is an
// spillway.Problem* type; the HTTP door maps it to a status code.
type Error struct {
	Type       string
	Detail     string
	Field      string
	RetryAfter time.Duration
	Err        error
	// mayBeStored: the job was sent to JetStream and may be stored though
	// no PubAck said so; a retry must reuse its id.
	mayBeStored bool
}

func (e *Error) Error() string {
	if e.Err != nil {
		return "admit: " + e.Detail + ": " + e.Err.Error()
	}
	return "admit: " + e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

// Options are the admitter's parts. JS, Publisher and Store are required.
type Options struct {
	JS        jetstream.JetStream
	Publisher *queue.Publisher
	// Store decides; Failover gives the failure modes.
	Store *Failover
	// Idempotency keeps idempotency records; nil disables idempotent
	// submission (keys are then ignored).
	Idempotency *Idempotency
	// OnStored, if set, is called after a job is stored and answered
	// (the job-status record), with where it was stored; it must not block.
	OnStored func(j *queue.Job, status spillway.Status, at queue.Stored)
	// OnBatchStored, if set, is called once a batch's jobs are answered,
	// with those it stored under the ids it made for them
	// (queue.NewJobIDs), in order, in place of OnStored for each: a writer
	// of their status records can then write them together. A job that
	// took over an earlier submission's id (its idempotency key's) is
	// reported by OnStored. It must not block.
	OnBatchStored func([]StoredJob)
	// Debounce keeps the newest debounced job of each group and
	// supersedes the others (debounce.go); nil: a debounced job only
	// waits its debounce, superseding nothing.
	Debounce *Debouncer
	// Observe, if set, is called for every decision and the other Events
	// (events.go). It runs on the submitting goroutine and must not block.
	Observe func(Event)
	Logger  *slog.Logger
	// Now is the clock for answers (default time.Now).
	Now func() time.Time
	// InstanceID is this admitter's id (NewInstanceID), the route of
	// settle requests for the jobs its memory store decides; "" stamps no
	// charge on them (settle.go).
	InstanceID string
	// SettleKV records which jobs of the shared store were settled, so
	// that each is settled once whichever admitter answers; nil: each
	// admitter remembers its own (settle.go).
	SettleKV jetstream.KeyValue
}

// Admitter admits jobs. Safe for concurrent use; SetConfig swaps the
// configuration in whole.
type Admitter struct {
	o         Options
	cfg       atomic.Pointer[config.Config]
	positions *positions
	retry     *retryAfters
	batches   reservations  // batch.go
	over      overrideState // overrides.go
	settles   settleOnce    // settle.go
}

// New returns an admitter for cfg. The queues' streams must exist
// (queue.EnsureStreams).
func New(cfg *config.Config, o Options) (*Admitter, error) {
	if o.JS == nil || o.Publisher == nil || o.Store == nil {
		return nil, errors.New("admit: Options need JS, Publisher and Store")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &Admitter{o: o, positions: newPositions(o.JS), retry: newRetryAfters(o.JS, o.Now)}
	a.settles.kv = o.SettleKV
	a.setConfig(cfg)
	return a, nil
}

// SetConfig replaces the configuration (a reload). Streams of new queues
// must exist first.
func (a *Admitter) SetConfig(cfg *config.Config) { a.setConfig(cfg) }

// Config returns the configuration in use: SetConfig's, with the runtime
// overrides merged into its tiers' (overrides.go).
func (a *Admitter) Config() *config.Config { return a.cfg.Load() }

// Run keeps the backlog positions fresh until ctx ends.
func (a *Admitter) Run(ctx context.Context) error {
	return a.positions.run(ctx, a.Config)
}

// Submit decides one job and stores it. It returns an Answer for admitted,
// queued and rejected jobs, and an *Error for everything else.
func (a *Admitter) Submit(ctx context.Context, r *Request) (Answer, error) {
	start := time.Now()
	cfg := a.cfg.Load()
	q := cfg.Queue(r.Queue)
	if q == nil {
		return Answer{}, &Error{Type: spillway.ProblemNotFound, Detail: fmt.Sprintf("no queue %.80q", r.Queue)}
	}
	// From here q is the queue as its enforcing tiers see it; full has
	// the shadow tiers too (shadow.go).
	full := q
	q = enforcing(q)
	c, err := check(full, q, r, a.o.Now)
	if err != nil {
		return Answer{}, err
	}
	if c.late > 0 {
		// Too late whatever the tiers say: nothing is asked, nothing taken.
		ans := waitTooLong(Answer{}, q.Name, c.late)
		a.decided(q.Name, string(ans.Reply.Status), reason(ans), time.Since(start))
		return ans, nil
	}
	tiers, jobKey, cost, notBefore := c.tiers, c.jobKey, c.cost, c.notBefore

	var claim *claim
	id := ""
	if r.IdempotencyKey != "" && a.o.Idempotency != nil {
		c, first, err := a.o.Idempotency.Claim(ctx, r.Caller, q.Name, r.IdempotencyKey, "", requestSum(full, r))
		if err != nil {
			return Answer{}, claimError(r.IdempotencyKey, err)
		}
		if first != nil {
			first.Reply.Duplicate = true
			a.decided(q.Name, "duplicate", "idempotency", time.Since(start))
			return *first, nil
		}
		claim, id = c, c.id
	}
	ans, err := a.submit(ctx, q, r, tiers, jobKey, cost, id, notBefore)
	if err == nil {
		ans.RateLimit = rateLimitOf(q, ans)
		ans.Shadow = a.decideShadow(ctx, full, r, cost, ans)
	}
	if claim != nil {
		a.o.Idempotency.Settle(claim, ans, err)
	}
	if err == nil {
		a.decided(q.Name, string(ans.Reply.Status), reason(ans), time.Since(start))
	} else {
		a.decided(q.Name, "error", errorReason(err), time.Since(start))
	}
	return ans, err
}

// claimError is the answer to an idempotency key that could not be
// claimed: another job's key, or a record that could not be read or
// written.
func claimError(key string, err error) error {
	if errors.Is(err, ErrIdempotencyMismatch) {
		return &Error{Type: spillway.ProblemIdempotencyMismatch, Field: spillway.HeaderIdempotencyKey,
			Detail: fmt.Sprintf("idempotency key %.80q was used for another job (its payload or a deciding header differs); nothing was taken: send this job with a new key", key)}
	}
	return &Error{Type: spillway.ProblemUnavailable, Detail: "recording the idempotency key", RetryAfter: time.Second, Err: err}
}

// checked is a submission that check found valid: the tiers to decide,
// the job's key and cost, and when its schedule lets it start (zero: at
// once). late > 0: it would start after its max-wait whatever the tiers
// say, and is to be answered wait-too-long with nothing taken.
type checked struct {
	tiers     []bucket.Tier
	jobKey    string
	cost      int64
	notBefore time.Time
	late      time.Duration
}

// check holds a submission against queue q (its enforcing tiers; full
// with its shadow tiers too) before anything is taken: its keys, its
// cost against what the tiers can ever grant, its schedule against the
// queue's bounds (from its arrival, read from now once its keys are known
// good) and its idempotency key's length. A batch checks each of its
// jobs with it.
func check(full, q *config.Queue, r *Request, now func() time.Time) (checked, error) {
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	tiers, jobKey, err := tiersFor(full, r)
	if err != nil {
		return checked{}, err
	}
	for j, t := range tiers { // tiers[j] is q.Limits[j], with the key's override
		// No wait would ever admit it: the request's fault, not a limit.
		if quota := t.Limit.Quota(); cost > quota {
			return checked{}, &Error{Type: spillway.ProblemBadCost, Field: spillway.HeaderCost,
				Detail: fmt.Sprintf("cost %d: limit tier %s (%s) never grants more than %d", cost, q.Limits[j].Name, t.Limit, quota)}
		}
	}
	arrived := now()
	notBefore, err := r.Schedule.start(q, arrived)
	if err != nil {
		return checked{}, err
	}
	c := checked{tiers: tiers, jobKey: jobKey, cost: cost, notBefore: notBefore}
	if c.late = r.Schedule.tooLate(arrived, notBefore); c.late > 0 {
		return c, nil
	}
	if len(r.DebounceKey) > MaxKeyLen {
		return checked{}, &Error{Type: spillway.ProblemBadRequest, Field: spillway.HeaderDebounceKey,
			Detail: fmt.Sprintf("%s of %d bytes: want at most %d", spillway.HeaderDebounceKey, len(r.DebounceKey), MaxKeyLen)}
	}
	if len(r.IdempotencyKey) > MaxIdempotencyKeyLen {
		return checked{}, &Error{Type: spillway.ProblemBadRequest, Field: spillway.HeaderIdempotencyKey,
			Detail: fmt.Sprintf("idempotency key of %d bytes: want at most %d", len(r.IdempotencyKey), MaxIdempotencyKeyLen)}
	}
	return c, nil
}

func (a *Admitter) submit(ctx context.Context, q *config.Queue, r *Request, tiers []bucket.Tier, jobKey string, cost int64, id string, notBefore time.Time) (Answer, error) {
	d, src, err := a.o.Store.DecideFrom(ctx, q.Name, tiers, cost)
	if err != nil {
		return Answer{}, decideError(err, d, cost)
	}
	p, err := a.stage(ctx, q, r, tiers, jobKey, cost, id, notBefore, d, src)
	if err != nil {
		return Answer{}, err
	}
	if p.j == nil {
		return p.ans, nil
	}
	stored, err := a.o.Publisher.Publish(ctx, p.dest, p.j)
	return a.finish(ctx, p, stored, err)
}

// decideError is the answer to a decision the store could not take.
func decideError(err error, d bucket.Decision, cost int64) error {
	if errors.Is(err, ErrStoreUnavailable) {
		return &Error{Type: spillway.ProblemUnavailable, Detail: "the bucket store is unreachable and the failure mode is closed",
			RetryAfter: d.RetryAfter, Err: err}
	}
	if errors.Is(err, bucket.ErrInvalidCost) {
		return &Error{Type: spillway.ProblemBadCost, Field: spillway.HeaderCost, Detail: fmt.Sprintf("cost %d", cost), Err: err}
	}
	return &Error{Type: spillway.ProblemUnavailable, Detail: "deciding", RetryAfter: time.Second, Err: err}
}

// placing is a decided job on its way to its stream: what stage made of
// the decision, for finish to answer once JetStream has answered the
// publish.
type placing struct {
	q      *config.Queue
	r      *Request
	tiers  []bucket.Tier
	jobKey string
	cost   int64
	src    Source
	now    time.Time
	ans    Answer
	// j is the job to publish to dest; nil when the answer is final
	// (rejected by the tiers, or refused as too late).
	j    *queue.Job
	dest queue.Destination
	// refunded: stage gave the decision's units back (a batch then
	// decides the jobs after it again).
	refunded bool
	// inBatch: a batch's job, whose storing the batch reports
	// (Options.OnBatchStored); stored is set by finish when j is stored.
	inBatch bool
	stored  *StoredJob
}

// StoredJob is a job a submission stored, answered with Status (admitted
// or queued), and where it was stored.
type StoredJob struct {
	Job    *queue.Job
	Status spillway.Status
	At     queue.Stored
}

// stage turns decision d of a submission (notBefore: when its schedule
// lets it start, zero: at once) into the job to publish and its
// destination, or into the final answer when the tiers rejected it or it
// would start after its max-wait (its units given back).
func (a *Admitter) stage(ctx context.Context, q *config.Queue, r *Request, tiers []bucket.Tier, jobKey string, cost int64, id string, notBefore time.Time, d bucket.Decision, src Source) (*placing, error) {
	p := &placing{q: q, r: r, tiers: tiers, jobKey: jobKey, cost: cost, src: src}
	p.ans = Answer{Decision: d, Limit: tiers[d.Tier].Limit, Source: src}
	p.ans.Reply.Queue = q.Name
	if d.Verdict == bucket.Rejected {
		p.ans.Reply.Status = spillway.Rejected
		p.ans.Reply.Type = spillway.ProblemRateLimited
		p.ans.Reply.RetryAfterMS = retryAfterMS(d.RetryAfter)
		return p, nil
	}
	if id == "" {
		var err error
		if id, err = queue.NewJobID(q.Name); err != nil {
			a.refund(ctx, q.Name, d)
			p.refunded = true
			return p, &Error{Type: spillway.ProblemInternal, Detail: "making a job id", Err: err}
		}
	}
	p.now = a.o.Now()
	// The weight is the key's under the configuration this submission
	// read (a reload applies to later jobs), stamped on the job so that
	// the drain weighs keys without matching raw keys against rules.
	p.j = &queue.Job{ID: id, Queue: q.Name, Key: jobKey, Cost: cost, Payload: r.Payload, EnqueuedAt: p.now, Header: jobHeader(r),
		Priority: r.Priority, Weight: q.Backlog.Fairness.WeightOf(jobKey)}
	if c := a.chargeOf(tiers, cost, d, src); c != "" {
		p.j.Header = withCharge(p.j.Header, c) // what a settle of its cost needs (settle.go)
	}
	p.j.Concurrency = concurrencyOf(q, r) // stamped as the weight is: workers bound keys without the configuration
	p.dest = queue.Ready
	if d.Verdict != bucket.Admitted || notBefore.After(p.now) || r.Schedule.Debounce > 0 {
		p.dest = queue.Backlog
		// The latest not-before of the tiers, whichever verdict is the
		// worst: an excess job must still wait for a leaky tier that
		// queued it. A scheduled job waits in the backlog for the later
		// of its own time and the tiers'; its units are taken now.
		if d.NotBefore.After(d.At) {
			p.j.NotBefore = d.NotBefore
		}
		if notBefore.After(p.j.NotBefore) {
			p.j.NotBefore, p.ans.Scheduled = notBefore, true
		}
		if late := r.Schedule.tooLate(p.now, a.backlogStartIf(ctx, q, r.Schedule, p.j.NotBefore, p.now)); late > 0 {
			p.ans, p.j, p.refunded = a.refuseLate(ctx, p.ans, q, cost, late), nil, true
			return p, nil
		}
		p.j.ExpiresAt = expiresAt(r.Schedule, p.now)
	}
	return p, nil
}

// jobHeader is the headers a job carries besides the queue's own: its
// trace context, and its submitter, which only the admitter sets.
func jobHeader(r *Request) nats.Header {
	if r.Caller == "" {
		return r.Trace
	}
	h := make(nats.Header, len(r.Trace)+1)
	for k, vs := range r.Trace {
		h[k] = vs
	}
	h[spillway.HeaderSubmitter] = []string{r.Caller}
	return h
}

// finish answers a staged job once JetStream has answered its publish
// (stored, err): a READY that is full sends it to the backlog, a backlog
// that refuses it gives its units back.
func (a *Admitter) finish(ctx context.Context, p *placing, stored queue.Stored, err error) (Answer, error) {
	q, r, j, d, ans := p.q, p.r, p.j, p.ans.Decision, p.ans
	dest := p.dest
	if errors.Is(err, queue.ErrReadyFull) {
		// Workers are down or far behind. The tiers admitted the job:
		// it waits in the backlog instead, its units still taken, and
		// starts at the leak rate from there (or expires, with a max-wait).
		ans.ReadyFull = true
		dest = queue.Backlog
		j.ExpiresAt = expiresAt(r.Schedule, p.now)
		stored, err = a.o.Publisher.Publish(ctx, dest, j)
	}
	switch {
	case errors.Is(err, queue.ErrQueueFull), errors.Is(err, queue.ErrKeyQueueFull):
		a.refund(ctx, q.Name, d)
		if d.Consumed&(1<<d.Tier) != 0 {
			ans.Refunded = p.cost
		}
		ans.Reply.Status = spillway.Rejected
		ans.Reply.Type = spillway.ProblemQueueFull
		if errors.Is(err, queue.ErrKeyQueueFull) {
			ans.Reply.Type = spillway.ProblemKeyFull
		}
		ans.Reply.RetryAfterMS = retryAfterMS(a.retryAfter(ctx, q, p.jobKey, errors.Is(err, queue.ErrKeyQueueFull)))
		return ans, nil
	case errors.Is(err, nats.ErrMaxPayload):
		// Refused by the client before it was sent: the job, with its
		// headers, is larger than the NATS server takes. No retry can
		// store it, and it took nothing.
		a.refund(ctx, q.Name, d)
		return Answer{}, &Error{Type: spillway.ProblemTooLarge,
			Detail: fmt.Sprintf("a payload of %d bytes, with the job's headers, is over the NATS server's max_payload", len(r.Payload)), Err: err}
	case err != nil:
		// Not stored, or not known to be: the units stay taken (a retry
		// with the same idempotency key stores the job at most once).
		return Answer{}, &Error{Type: spillway.ProblemUnavailable, Detail: "storing the job in JetStream", RetryAfter: time.Second, Err: err, mayBeStored: true}
	}
	ans.Reply.ID = j.ID
	if dest == queue.Ready {
		ans.Reply.Status = spillway.Admitted
	} else {
		ans.Reply.Status = spillway.Queued
		if !j.NotBefore.IsZero() {
			nb := j.NotBefore.UTC()
			ans.Reply.NotBefore = &nb
		}
		pos := a.positions.position(q.Name, stored.Sequence)
		ans.Reply.Position = pos
		est := estimatedStart(p.now, j.NotBefore, pos, q.Backlog.LeakRate).UTC()
		ans.Reply.EstimatedStart = &est
	}
	p.stored = &StoredJob{Job: j, Status: ans.Reply.Status, At: stored}
	if r.Schedule.Debounce > 0 && dest == queue.Backlog {
		a.debounce(ctx, p, stored)
	}
	if a.o.OnStored != nil && (!p.inBatch || a.o.OnBatchStored == nil) {
		a.o.OnStored(j, ans.Reply.Status, stored)
	}
	return ans, nil
}

// retryAfter is how long until the backlog (or the key's share of it)
// has a place for a refused job (retryafter.go).
func (a *Admitter) retryAfter(ctx context.Context, q *config.Queue, key string, keyFull bool) time.Duration {
	var d time.Duration
	var err error
	if keyFull {
		d, err = a.retry.keyFull(ctx, q, key)
	} else {
		d, err = a.retry.queueFull(ctx, q)
	}
	if err != nil {
		d = fallback(q)
		if ctx.Err() != nil {
			return d // the caller has gone: nobody reads the answer
		}
		a.observe(Event{Kind: RetryAfterFallback, Queue: q.Name})
		a.o.Logger.Warn("admit: could not read the backlog for a refused job's Retry-After; answering the time to drain a whole backlog",
			"queue", q.Name, "retry_after", d, "err", err)
	}
	return d
}

// refund gives back the units decision d took, in the store that took it
// (a failure-mode-open decision took none), for a job of queue q that is
// refused after all.
func (a *Admitter) refund(ctx context.Context, q string, d bucket.Decision) {
	if err := d.Refund(ctx); err != nil {
		a.o.Logger.Warn("admit: could not give a refused job's units back", "queue", q, "err", err)
	}
}

// tiersFor builds the enforcing tiers of a request (shadow tiers are
// decided apart, shadow.go): each tier's bucket key is
// "<tier>:<token of the client key>", so a key of any length or content
// costs the store the same and never appears raw. The job's key (for the
// backlog's per-key bound) is the first non-global enforcing tier's
// client key.
//
// A request a tier cannot key is refused (bad-key) before anything is
// taken: one without the header of a header:NAME tier (or with it
// empty, which keys nobody apart), unless the tier
// says on_missing: shared (then the empty value is its key, one bucket
// for all such requests), and one from a door without client addresses
// to an ip tier.
func tiersFor(q *config.Queue, r *Request) ([]bucket.Tier, string, error) {
	tiers := make([]bucket.Tier, 0, len(q.Limits))
	jobKey, haveJobKey := "", false
	for i, l := range q.Limits {
		if l.Shadow() {
			continue // decided apart, never refusing (shadow.go)
		}
		k, err := clientKey(q, l, r)
		if err != nil {
			return nil, "", err
		}
		if l.Key.Kind != config.KeyGlobal && !haveJobKey {
			jobKey, haveJobKey = k, true
		}
		tiers = append(tiers, tierOf(i, l, k))
	}
	return tiers, jobKey, nil
}

// tierKey is the bucket key of tier i (its place in the queue's limits,
// shadow tiers counted) for client key k.
func tierKey(i int, k string) string { return strconv.Itoa(i) + ":" + queue.KeyToken(k) }

// clientKey is the client key tier l of queue q reads from request r, or
// the bad-key error of a request the tier cannot key.
func clientKey(q *config.Queue, l config.Limit, r *Request) (string, error) {
	var k string
	switch l.Key.Kind {
	case config.KeyGlobal:
	case config.KeyIP:
		if r.NoPeer {
			return "", &Error{Type: spillway.ProblemBadKey,
				Detail: fmt.Sprintf("limit tier %s of queue %s keys on the client's IP address, which only the HTTP door knows: submit over HTTP", l.Name, q.Name)}
		}
		k = r.Peer
	case config.KeyHeader:
		if r.Keys != nil {
			k = r.Keys(l.Key.Header)
		}
		if len(k) > MaxKeyLen {
			return "", &Error{Type: spillway.ProblemBadKey, Field: l.Key.Header,
				Detail: fmt.Sprintf("header %s of %d bytes: want at most %d", l.Key.Header, len(k), MaxKeyLen)}
		}
		if k == "" && l.OnMissing != config.MissingShared {
			return "", &Error{Type: spillway.ProblemBadKey, Field: l.Key.Header,
				Detail: fmt.Sprintf("missing header %s: limit tier %s of queue %s keys on it", l.Key.Header, l.Name, q.Name)}
		}
	}
	return k, nil
}

// slotEvery is how often the backlog frees a slot at the leak rate.
func slotEvery(r bucket.Rate) time.Duration {
	if r.Count <= 0 {
		return time.Second
	}
	return time.Duration((int64(r.Per) + r.Count - 1) / r.Count)
}

// estimatedStart is when a queued job should start: after its not-before,
// and after the pos−1 jobs ahead of it have left at the leak rate.
func estimatedStart(now, notBefore time.Time, pos int64, leak bucket.Rate) time.Time {
	est := now
	if pos > 1 && leak.Count > 0 {
		est = now.Add(time.Duration((pos - 1) * int64(leak.Per) / leak.Count))
	}
	if notBefore.After(est) {
		est = notBefore
	}
	return est
}

// retryAfterMS rounds up to whole milliseconds; Never stays -1.
func retryAfterMS(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func reason(a Answer) string {
	switch {
	case a.Reply.Type == spillway.ProblemQueueFull:
		return "backlog_full"
	case a.Reply.Type == spillway.ProblemKeyFull:
		return "key_backlog_full"
	case a.Reply.Type == spillway.ProblemWaitTooLong:
		return "wait_too_long"
	case a.Scheduled:
		return "scheduled"
	case a.ReadyFull:
		return "ready_full"
	case a.Source == FromOpen:
		return "failure_mode_open"
	case a.Source == FromLocal:
		return "limit_local"
	case a.Decision.Verdict == bucket.Excess:
		return "excess"
	}
	return "limit"
}

func errorReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return strings.TrimPrefix(e.Type, "https://spillway.dev/problems/")
	}
	return "internal"
}
