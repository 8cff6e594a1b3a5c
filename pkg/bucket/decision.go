package bucket

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Verdict is what a limit (or a set of tiers) says about one job. Verdicts
// are ordered from best to worst; a multi-tier decision takes the worst.
type Verdict uint8

const (
	// Admitted: run the job now.
	Admitted Verdict = iota
	// Queued: a leaky bucket accepts the job but it must not start before
	// Decision.NotBefore.
	Queued
	// Excess: the limit would refuse the job now. The caller queues it in
	// the backlog if the backlog has room for the key, else rejects it.
	// Excess never consumes from the limit that said it; the other tiers of
	// the decision may have consumed (Decision.Consumed), and a caller that
	// rejects the job gives their units back with Decision.Refund.
	Excess
	// Rejected: a leaky bucket's burst is full. Nothing was consumed.
	Rejected
)

var verdictNames = [...]string{"admitted", "queued", "excess", "rejected"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Decision is the answer for one job over all its tiers. A denial is a
// value, not an error.
type Decision struct {
	// Verdict is the worst verdict of the tiers.
	Verdict Verdict
	// At is the store's clock when it decided (Redis TIME for the Redis
	// store).
	At time.Time
	// NotBefore is the earliest start: the latest not-before of all tiers;
	// At when nothing delays the job.
	NotBefore time.Time
	// Tier is the index of the tier that bounds the answer: the one that
	// gave the worst verdict, and among those the fewest remaining units.
	// Rate-limit headers describe this tier.
	Tier int
	// Remaining is the fewest units any tier would still accept now after
	// this job (0 when it was refused).
	Remaining int64
	// RetryAfter is, for Rejected and Excess, how long until the refusing
	// tiers would accept the job if nothing else arrived meanwhile; negative
	// (Never) if they never can because the cost is larger than the limit.
	// Zero otherwise.
	RetryAfter time.Duration
	// ResetAfter is how long until every tier is back to its empty state.
	ResetAfter time.Duration
	// Consumed has bit i set when tiers[i] took the job's units: its own
	// verdict was Admitted or Queued. An Excess tier takes nothing, and a
	// Rejected decision changes no tier, so Consumed is 0 for Rejected. An
	// Excess decision may have consumed from its other tiers: if the caller
	// then cannot queue the job (the backlog is full), it gives those units
	// back with Decision.Refund.
	Consumed uint8
	// TierAt is when each tier was decided, by index, in Unix nanoseconds,
	// for a store that decides a job's tiers at different clocks (the Redis
	// store on a Cluster runs one script per slot, each at its own shard's
	// TIME): its Refund gives each tier's units back at that tier's time.
	// All zero when every tier was decided at At.
	TierAt [MaxTiers]int64

	// What Refund needs, recorded by the store that decided (Bind): the
	// store and the request. Zero for a Decision no store made.
	store Store
	group string
	tiers []Tier
	cost  int64
}

// Refund gives back, at the deciding store's clock, the units this decision
// took from its tiers (the bits of Consumed), as Store.Refund describes: the
// store that decided and the request it answered travel with the Decision,
// as a golang.org/x/time/rate Reservation carries what its Cancel needs. A
// decision that consumed nothing (Rejected, Excess on every tier, or a
// Decision no store made with Consumed 0) needs no refund: Refund returns
// nil at once. It is safe to call from any goroutine; refunding one
// decision twice gives back twice (never beyond an empty state).
func (d Decision) Refund(ctx context.Context) error {
	if d.store == nil {
		if d.Consumed == 0 {
			return nil
		}
		return fmt.Errorf("%w: the decision was not made by a store", ErrInvalidRefund)
	}
	return d.store.Refund(ctx, d)
}

// Bind records on d what its refund needs: s, the store that decided it,
// and the request it answers (the group, tiers and cost its Decide took). A
// Store calls it on every Decision it returns; stores in this package do so
// themselves. d keeps tiers, not a copy: the caller must not change the
// slice's elements while d may still be refunded.
func (d *Decision) Bind(s Store, group string, tiers []Tier, cost int64) {
	d.store, d.group, d.tiers, d.cost = s, group, tiers, cost
}

// Request returns the request d answers, as Bind recorded it: what a
// Store's Refund gives back to.
func (d Decision) Request() (group string, tiers []Tier, cost int64) {
	return d.group, d.tiers, d.cost
}

// Never is the RetryAfter of a job whose cost exceeds what the limit can ever
// grant.
const Never time.Duration = never

// ErrInvalidCost is returned for a cost below 1.
var ErrInvalidCost = errors.New("bucket: invalid cost")

// ErrTooManyTiers is returned for a decision over more than MaxTiers tiers or
// over none.
var ErrTooManyTiers = fmt.Errorf("bucket: a decision takes 1 to %d tiers", MaxTiers)

// checkRequest validates what every store checks before deciding.
func checkRequest(tiers []Tier, cost int64) error {
	if len(tiers) == 0 || len(tiers) > MaxTiers {
		return fmt.Errorf("%w, got %d", ErrTooManyTiers, len(tiers))
	}
	if cost < 1 {
		return fmt.Errorf("%w: %d (want ≥ 1)", ErrInvalidCost, cost)
	}
	for i := range tiers {
		if !tiers[i].Limit.valid {
			return fmt.Errorf("%w: tier %d (key %.40q) has no valid limit; build it with Spec.Build or a New* constructor",
				ErrInvalidLimit, i, tiers[i].Key)
		}
	}
	return nil
}

// TierResult is one tier's part of a decision, as a store reports it. It is
// exported for stores outside this package (redisbucket); callers of a Store
// see only the combined Decision.
type TierResult struct {
	Verdict    Verdict
	NotBefore  int64 // Unix ns
	Remaining  int64
	RetryAfter int64 // ns; negative: never
	ResetAfter int64 // ns
}

// Combine folds per-tier results into one Decision taken at now (Unix ns):
// the worst verdict, the latest not-before, the fewest remaining units. It is
// the one place where tiers are combined, for every store.
func Combine(now int64, tiers []TierResult) Decision {
	var c combiner
	c.start(now)
	for i := range tiers {
		c.add(i, &tiers[i])
	}
	var d Decision
	c.finish(&d)
	return d
}

// single sets d from the one tier of a single-tier decision: what Combine
// computes for one tier, without the folding (the memory store's hot path;
// the conformance suite checks it against Combine).
func (d *Decision) single(now int64, t *TierResult) {
	// Field by field: a composite literal would build a temporary and copy
	// it, a measurable part of a memory decision.
	d.Verdict = t.Verdict
	d.At = time.Unix(0, now)
	d.NotBefore = d.At
	if t.NotBefore > now {
		d.NotBefore = time.Unix(0, t.NotBefore)
	}
	d.Tier = 0
	d.Remaining = t.Remaining
	d.RetryAfter = 0
	d.ResetAfter = time.Duration(max(0, t.ResetAfter))
	d.Consumed = 1
	if t.Verdict >= Excess {
		d.Remaining = 0
		d.RetryAfter = time.Duration(t.RetryAfter)
		d.Consumed = 0
	}
}

// combiner folds tiers one at a time (stores fold without building a slice).
type combiner struct {
	now, notBefore, reset, retry int64
	verdict                      Verdict
	tier                         int
	remaining, fewest            int64
	consumed                     uint8 // tiers that admitted or queued the job
}

func (c *combiner) start(now int64) {
	*c = combiner{now: now, notBefore: now, tier: -1}
}

func (c *combiner) add(i int, t *TierResult) {
	c.notBefore = max(c.notBefore, t.NotBefore)
	c.reset = max(c.reset, t.ResetAfter)
	switch {
	case c.tier < 0 || t.Verdict > c.verdict:
		c.verdict, c.tier, c.remaining = t.Verdict, i, t.Remaining
	case t.Verdict == c.verdict && t.Remaining < c.remaining:
		c.tier, c.remaining = i, t.Remaining
	}
	if t.Verdict <= Queued {
		c.consumed |= 1 << uint(i)
	}
	if i == 0 || t.Remaining < c.fewest {
		c.fewest = t.Remaining
	}
	if t.Verdict >= Excess && c.retry >= 0 {
		if t.RetryAfter < 0 {
			c.retry = never
		} else {
			c.retry = max(c.retry, t.RetryAfter)
		}
	}
}

func (c *combiner) finish(d *Decision) {
	*d = Decision{
		Verdict:    c.verdict,
		At:         time.Unix(0, c.now),
		NotBefore:  time.Unix(0, c.notBefore),
		Tier:       c.tier,
		Remaining:  c.fewest,
		ResetAfter: time.Duration(c.reset),
	}
	if c.verdict >= Excess {
		d.Remaining = 0
		d.RetryAfter = time.Duration(c.retry)
	}
	if c.verdict != Rejected {
		d.Consumed = c.consumed
	}
}

// Bucket is the state of one key under one Limit, for callers that keep
// state themselves (a store keeps its own). The zero value is a key never
// seen. A Bucket is not safe for concurrent use.
type Bucket struct {
	st    state
	used  bool
	log   []logEntry // sliding_log only
	limit Algorithm
}

// Decide decides one job of the given cost at now against b and updates b
// unless the job is rejected. It is the pure form of the algorithm; time is a
// parameter. It reports an error only for an invalid limit or cost, or when
// b was last used with a limit of another algorithm.
func (l Limit) Decide(b *Bucket, now time.Time, cost int64) (Decision, error) {
	if err := checkRequest([]Tier{{Limit: l}}, cost); err != nil {
		return Decision{}, err
	}
	if b.used && b.limit != l.alg {
		return Decision{}, fmt.Errorf("%w: bucket holds %s state, limit is %s", ErrInvalidLimit, b.limit, l.alg)
	}
	t := now.UnixNano()
	var r tierResult
	if l.alg == SlidingLog {
		expired := l.slidingLog(&r, b.log, t, cost)
		if r.Verdict == Admitted {
			b.log = append(b.log[expired:], logEntry{t: r.at, n: cost})
		}
	} else {
		l.step(&r, b.st, !b.used, t, cost)
		if r.Verdict != Rejected {
			b.st = r.next
		}
	}
	if r.Verdict != Rejected {
		b.used, b.limit = true, l.alg
	}
	return Combine(t, []TierResult{r.TierResult}), nil
}

// Refund gives back, at now, the cost units that a job decided at at (its
// Decision.At) took from b: the pure form of Decision.Refund, for state you
// keep yourself. Call it only for a decision that consumed (Decision.Consumed
// bit 0 for a single limit). A Bucket whose state is empty after the refund
// is reset to the zero value, a key never seen, as a store forgets such a
// key; a Bucket never used is left alone. It reports an error only for an
// invalid limit or cost, or when b was last used with a limit of another
// algorithm.
func (l Limit) Refund(b *Bucket, now, at time.Time, cost int64) error {
	return l.Settle(b, now, at, cost, 0) // a settle at 0 gives back the whole cost
}
