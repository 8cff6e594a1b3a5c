package bucket

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxActualCost bounds the actual cost a settle takes: 2^31 − 1 units.
const MaxActualCost = 1<<31 - 1

// ErrInvalidActual is returned for an actual cost below 0 or above
// MaxActualCost.
var ErrInvalidActual = errors.New("bucket: invalid actual cost")

// Settle settles decision d's cost at actual units, at the deciding store's
// clock, as Store.Settle describes: the store that decided and the request
// it answered travel with the Decision, as they do for Refund. A decision
// that consumed nothing, or an actual cost equal to the decided one, needs
// no settle: Settle returns nil at once (after checking actual).
func (d Decision) Settle(ctx context.Context, actual int64) error {
	if err := checkActual(actual); err != nil {
		return err
	}
	if d.store == nil {
		if d.Consumed == 0 {
			return nil
		}
		return fmt.Errorf("%w: the decision was not made by a store", ErrInvalidRefund)
	}
	return d.store.Settle(ctx, d, actual)
}

func checkActual(actual int64) error {
	if actual < 0 || actual > MaxActualCost {
		return fmt.Errorf("%w: %d (want 0 to %d)", ErrInvalidActual, actual, MaxActualCost)
	}
	return nil
}

// CheckSettle validates a settle by store s the way every store does: d
// passes CheckRefund and actual is 0 to MaxActualCost. Stores outside this
// package call it before settling.
func CheckSettle(s Store, d Decision, actual int64) error {
	if err := checkActual(actual); err != nil {
		return err
	}
	return CheckRefund(s, d)
}

// Rebind returns a Decision of store s for a job of cost units decided at
// at by the tiers given, every one of them having consumed: what Settle and
// Refund need of a decision taken earlier, perhaps by another process (the
// admitter rebuilds one from a job's charge header). Only its At, Consumed
// and request are set.
func Rebind(s Store, group string, tiers []Tier, cost int64, at time.Time) Decision {
	d := Decision{At: at, NotBefore: at, Consumed: uint8(1<<uint(len(tiers)) - 1)}
	d.Bind(s, group, tiers, cost)
	return d
}

// settle moves the units a decision at time at took from a key's state st
// (fresh: the key has no state) by delta = actual − cost units, at time now,
// for a rate or window algorithm. It reports false when nothing changes.
// A negative delta is a refund of −delta units (refund); a positive one is
// a charge, taken whatever the state holds — a charge never refuses:
//
//   - leaky: the level u ← u_now + delta, at most one quota beyond full
//     (2·(burst+1) units; less for a limit so large that its scaled
//     quantities would leave the exact range);
//   - token: tokens ← tokens_now − delta, at least −burst (a debt the
//     refill pays before the next job);
//   - fixed: count ← min(L, count + delta) if at's window is still the
//     current one;
//   - sliding window: the current or the previous count, whichever holds
//     at's window, plus delta, at most L; nothing if at's window is older.
//
// A key without state takes a charge as a key never seen (a bucket's empty
// level, a window's count of 0) and gives back nothing.
func (l *Limit) settle(r *refundResult, st state, fresh bool, now, at, delta int64) bool {
	switch {
	case delta == 0:
		return false
	case delta < 0:
		return !fresh && l.refund(r, st, now, at, -delta)
	}
	p, a := l.period, l.amount
	switch l.alg {
	case LeakyBucket:
		q := l.burst + 1 // the quota
		u := int64(0)
		if !fresh {
			now = max(now, st.t)
			u = st.x + p
			if dt := now - st.t; dt >= l.drainTime(u) {
				u = 0
			} else {
				u -= dt * a
			}
		}
		most := min(2*q*p, maxExact-q*p)
		u = min(most, u+min(delta, 2*q)*p)
		*r = refundResult{next: state{x: u - p, t: now}, now: now, reset: l.drainTime(u)}
	case TokenBucket:
		full := l.burst * p
		k := full
		if !fresh {
			now = max(now, st.t)
			k = st.x
			if dt := now - st.t; dt >= l.drainTime(full-k) {
				k = full
			} else {
				k += dt * a
			}
		}
		k = max(-full, k-min(delta, 2*l.burst)*p)
		*r = refundResult{next: state{x: k, t: now}, now: now, reset: l.drainTime(full - k)}
	case FixedWindow:
		w := l.window
		aw := at - floorMod(at, w)
		if now-floorMod(now, w) > aw || (!fresh && st.t > aw) {
			return false // the job's window has passed: its units count no more
		}
		count := int64(0)
		if !fresh && st.t == aw {
			count = st.x
		}
		now = max(now, aw)
		count = min(l.count, count+delta)
		*r = refundResult{next: state{x: count, t: aw}, now: now, reset: aw + w - now}
	default:
		w := l.window
		var start, c, pc int64
		if fresh {
			start = now - floorMod(now, w)
		} else {
			start, now, c, pc = slidingState(st, now, w)
		}
		switch at - floorMod(at, w) {
		case start:
			c = min(l.count, c+delta)
		case start - w:
			pc = min(l.count, pc+delta)
		default:
			return false
		}
		*r = refundResult{next: state{x: packCounts(c, pc), t: start}, now: now}
		switch {
		case c > 0:
			r.reset = start + 2*w - now
		case pc > 0:
			r.reset = start + w - now
		}
	}
	return true
}

// settleLog settles, in a sliding log, the entry of a job of cost n
// admitted at time at (the newest entry {at, n}) at actual units, if it is
// still in the window at now: the entry leaves the log for an actual cost
// of 0, shrinks for a smaller one, and grows for a larger one until the
// window's live entries sum to L. It returns the log, the settle's time and
// the time until the log is empty (≤ 0: empty now), or ok false when
// nothing changes. The log is changed in place.
func (l *Limit) settleLog(log []logEntry, now, at, n, actual int64) (out []logEntry, when, reset int64, ok bool) {
	if actual == n || len(log) == 0 {
		return log, now, 0, false
	}
	now = max(now, log[len(log)-1].t)
	if at <= now-l.window {
		return log, now, 0, false // the entry has left the window
	}
	i := len(log) - 1
	for ; i >= 0 && log[i].t >= at; i-- {
		if log[i].t == at && log[i].n == n {
			break
		}
	}
	if i < 0 || log[i].t != at || log[i].n != n {
		return log, now, 0, false
	}
	switch {
	case actual == 0:
		log = append(log[:i], log[i+1:]...)
	case actual < n:
		log[i].n = actual
	default:
		var live int64
		for _, e := range log {
			if e.t > now-l.window {
				live += e.n
			}
		}
		grow := min(actual-n, max(0, l.count-live))
		if grow == 0 {
			return log, now, 0, false
		}
		log[i].n += grow
	}
	if len(log) > 0 {
		reset = log[len(log)-1].t + l.window - now
	}
	return log, now, reset, true
}

// Settle settles, at now, the cost of a job decided at at (its Decision.At)
// that took cost units from b, at actual units: the pure form of
// Decision.Settle, for state you keep yourself. Call it only for a
// decision that consumed. A Bucket whose state is empty after the settle is
// reset to the zero value. It reports an error only for an invalid limit,
// cost or actual cost, or when b was last used with a limit of another
// algorithm.
func (l Limit) Settle(b *Bucket, now, at time.Time, cost, actual int64) error {
	if err := checkRequest([]Tier{{Limit: l}}, cost); err != nil {
		return err
	}
	if err := checkActual(actual); err != nil {
		return err
	}
	if b.used && b.limit != l.alg {
		return fmt.Errorf("%w: bucket holds %s state, limit is %s", ErrInvalidLimit, b.limit, l.alg)
	}
	var reset int64
	if l.alg == SlidingLog {
		var ok bool
		if b.log, _, reset, ok = l.settleLog(b.log, now.UnixNano(), at.UnixNano(), cost, actual); !ok {
			return nil
		}
	} else {
		var r refundResult
		if !l.settle(&r, b.st, !b.used, now.UnixNano(), at.UnixNano(), actual-cost) {
			return nil
		}
		b.st, reset = r.next, r.reset
	}
	if reset <= 0 {
		*b = Bucket{}
		return nil
	}
	b.used, b.limit = true, l.alg
	return nil
}

// Settle settles, at the store's clock, the cost of decision d at actual
// units in the tiers of d.Consumed (see Store.Settle), all under the locks
// of their shards at once. It never returns an error for a decision this
// store made and a valid actual cost; ctx is not used.
func (m *Memory) Settle(_ context.Context, d Decision, actual int64) error {
	return m.settle(m.now(), d, actual)
}

func (m *Memory) settle(t int64, d Decision, actual int64) error {
	if err := CheckSettle(m, d, actual); err != nil {
		return err
	}
	if d.Consumed == 0 || actual == d.cost {
		return nil
	}
	var (
		hashes [MaxTiers]uint64
		locks  shardLocks
	)
	tiers := d.tiers
	for i := range tiers {
		if d.Consumed&(1<<uint(i)) != 0 {
			hashes[i] = m.hash(d.group, &tiers[i])
			locks.add(uint8(hashes[i] >> m.shift))
		}
	}
	at := d.At.UnixNano()
	locks.lock(m)
	for i := range tiers {
		if d.Consumed&(1<<uint(i)) != 0 {
			m.shardOf(hashes[i]).settle(hashes[i], &tiers[i].Limit, t, at, d.cost, actual)
		}
	}
	locks.unlock(m)
	return nil
}

// settle settles the cost of a job of key h decided at time at, at time t:
// its state changes in place, or the key is forgotten when its state is
// empty again. A key without state has nothing to give back (a refund, or a
// settle below the cost); a charge to it creates it.
func (s *shard) settle(h uint64, l *Limit, t, at, cost, actual int64) {
	idx, ok := s.lookup(h)
	var r refundResult
	if l.alg == SlidingLog {
		if !ok {
			return // no log: the entry has left the window
		}
		var log []logEntry
		if log, r.now, r.reset, ok = l.settleLog(s.logs[idx], t, at, cost, actual); !ok {
			return
		}
		s.logs[idx] = log
	} else {
		var st state
		if ok {
			st = s.entries[idx].st
		}
		if !l.settle(&r, st, !ok, t, at, actual-cost) {
			return
		}
	}
	if r.reset <= 0 {
		if ok {
			s.remove(idx)
			s.forgotten++
		}
		return
	}
	if !ok {
		idx = s.insert(h, r.now)
	}
	e := &s.entries[idx]
	if l.alg != SlidingLog {
		e.st = r.next
	}
	e.mark = min(r.now+r.reset, maxStamp) | refBit
}
