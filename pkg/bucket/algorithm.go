package bucket

// This file holds the five algorithms as pure functions of (state, now, cost)
// in integer nanoseconds. The Redis scripts in redisbucket mirror them line
// for line; the conformance suite checks that both agree.
//
// Buckets are kept scaled so that nothing is ever divided until a time is
// reported: a rate of Count per Per is reduced to amount units per period
// nanoseconds, and an excess (or a token count) e is stored as e·period. One
// nanosecond drains `amount` scaled units; one job unit weighs `period`.

// state is what a store keeps for one key of a rate or window algorithm. The
// sliding log keeps its entries apart (logEntry).
type state struct {
	x int64 // leaky: scaled excess; token: scaled tokens; fixed: count; sliding window: packed counts
	t int64 // leaky, token: time of the last update; windows: start of the current window
}

type logEntry struct {
	t, n int64 // time admitted, units
}

// never is the RetryAfter of a job that no amount of waiting can admit (its
// cost exceeds what the limit can ever grant).
const never = -1

// tierResult is one tier's answer and the state to store if the job is not
// rejected overall.
type tierResult struct {
	TierResult       // ResetAfter is also the key's time to live
	next       state // to store unless the decision is rejected
	at         int64 // the decision time, never before the state's last update
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) == (b < 0) {
		q++
	}
	return q
}

// drainTime is the time the bucket needs to drain (or refill) x scaled units:
// ⌈x/amount⌉ ns, without a division for the common amount of 1 (any rate
// whose count divides its period, such as 10/s).
func (l *Limit) drainTime(x int64) int64 {
	if l.amount == 1 {
		return x
	}
	return ceilDiv(x, l.amount)
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// step decides one job of cost n at time now for a rate or window algorithm.
// fresh is true for a key without state. The caller has validated n ≥ 1.
func (l *Limit) step(r *tierResult, st state, fresh bool, now, n int64) {
	*r = tierResult{}
	switch l.alg {
	case LeakyBucket:
		l.leaky(r, st, fresh, now, n)
	case TokenBucket:
		l.token(r, st, fresh, now, n)
	case FixedWindow:
		l.fixed(r, st, fresh, now, n)
	default:
		l.slidingWindow(r, st, fresh, now, n)
	}
}

// leaky is nginx limit_req generalised to a cost n: the job's first unit is
// "in service" as nginx's request is, its other n−1 units are excess:
//
//	e' = max(0, e − Δt·r + 1) + n − 1     (a key without state: e' = n − 1)
//
// For n = 1 this is the contract's max(0, e − Δt·r + n) exactly; for n > 1 it
// keeps a remembered idle key and a forgotten one deciding alike (see
// docs/admission.md).
func (l *Limit) leaky(r *tierResult, st state, fresh bool, now, n int64) {
	p, a := l.period, l.amount
	var x int64
	if !fresh {
		if now < st.t {
			now = st.t // the clock stepped back: no time has passed
		}
		x = st.x + p // the first unit, before leaking
		if dt := now - st.t; dt >= l.drainTime(x) {
			x = 0
		} else {
			x -= dt * a
		}
	}
	r.at, r.NotBefore = now, now
	if n-1 > l.burst {
		// No state can ever take the job.
		r.Verdict, r.RetryAfter = Rejected, never
		r.ResetAfter = l.leakyReset(x - p)
		return
	}
	x += (n - 1) * p
	if bp := l.burst * p; x > bp {
		r.Verdict = Rejected
		r.RetryAfter = l.drainTime(x - bp)
		r.ResetAfter = l.leakyReset(x - n*p)
		return
	}
	r.next = state{x: x, t: now}
	r.Remaining = (l.burst*p - x) / p
	r.ResetAfter = l.leakyReset(x)
	if dp := l.delay * p; x > dp {
		r.Verdict = Queued
		r.NotBefore = now + l.drainTime(x-dp)
	}
}

// leakyReset is the time until a stored excess x no longer affects any
// decision: max(0, x − Δt·r + 1) = 0.
func (l *Limit) leakyReset(x int64) int64 {
	return max(0, l.drainTime(x+l.period))
}

func (l *Limit) token(r *tierResult, st state, fresh bool, now, n int64) {
	p, a := l.period, l.amount
	full := l.burst * p
	k := full
	if !fresh {
		if now < st.t {
			now = st.t
		}
		k = st.x
		if dt := now - st.t; dt >= l.drainTime(full-k) {
			k = full
		} else {
			k += dt * a
		}
	}
	r.at, r.NotBefore, r.next = now, now, state{x: k, t: now}
	switch {
	case n > l.burst:
		r.Verdict, r.RetryAfter = Excess, never
	case k >= n*p:
		k -= n * p
		r.next.x = k
	default:
		r.Verdict = Excess
		r.RetryAfter = l.drainTime(n*p - k)
	}
	r.Remaining = max(0, k/p) // a settle's charge may leave a debt (k < 0)
	r.ResetAfter = l.drainTime(full - k)
}

func (l *Limit) fixed(r *tierResult, st state, fresh bool, now, n int64) {
	w := l.window
	start := now - floorMod(now, w)
	var count int64
	if !fresh && st.t >= start {
		// The same window, or a later one if the clock stepped back.
		start, count = st.t, st.x
		now = max(now, start)
	}
	r.at, r.NotBefore, r.next, r.ResetAfter = now, now, state{x: count, t: start}, start+w-now
	switch {
	case n > l.count:
		r.Verdict, r.RetryAfter = Excess, never
	case count+n <= l.count:
		count += n
		r.next.x = count
	default:
		r.Verdict = Excess
		r.RetryAfter = start + w - now
	}
	r.Remaining = l.count - count
}

func packCounts(cur, prev int64) int64       { return cur | prev<<32 }
func unpackCounts(x int64) (cur, prev int64) { return x & (1<<32 - 1), x >> 32 }

// slidingState reads a sliding window's stored state as of now: the
// current window's start (the stored one if it is later, as another
// admitter's clock may be ahead), now moved up to that start, and the
// current and previous windows' counts (a state older than the previous
// window counts nothing).
func slidingState(st state, now, w int64) (start, at, cur, prev int64) {
	start, at = now-floorMod(now, w), now
	switch {
	case st.t >= start:
		start = st.t
		at = max(now, start)
		cur, prev = unpackCounts(st.x)
	case st.t == start-w:
		prev, _ = unpackCounts(st.x)
	}
	return start, at, cur, prev
}

// slidingWindow is the sliding-window counter: p·(W−elapsed) + (c+n)·W ≤ L·W.
func (l *Limit) slidingWindow(r *tierResult, st state, fresh bool, now, n int64) {
	w, lim := l.window, l.count
	var start, c, p int64
	if fresh {
		start = now - floorMod(now, w)
	} else {
		start, now, c, p = slidingState(st, now, w)
	}
	el := now - start
	r.at, r.NotBefore = now, now
	switch {
	case n > lim:
		r.Verdict, r.RetryAfter = Excess, never
	case c+n <= lim && p*(w-el)+(c+n)*w <= lim*w:
		c += n
	default:
		r.Verdict = Excess
		r.RetryAfter = slidingWait(lim, w, el, c, p, n)
	}
	r.next = state{x: packCounts(c, p), t: start}
	r.Remaining = max(0, (lim*w-p*(w-el))/w-c)
	switch {
	case c > 0:
		r.ResetAfter = start + 2*w - now
	case p > 0:
		r.ResetAfter = start + w - now
	}
}

// slidingWait is how long a job of cost n ≤ lim waits until the sliding
// window admits it, if nothing else is admitted meanwhile.
func slidingWait(lim, w, el, c, p, n int64) int64 {
	if free := lim - c - n; free >= 0 && p > 0 {
		// Later in this window: p·(W−el') ≤ free·W.
		if e := w - free*w/p; e < w {
			return e - el
		}
	}
	// In the next window the current count becomes the previous one.
	e := int64(0)
	if c > 0 {
		e = max(0, w-(lim-n)*w/c)
	}
	return w - el + e
}

// slidingLog decides against the log of admitted jobs, oldest first. It
// returns the result and how many leading entries have left the window; the
// caller drops them and, if the job is admitted, appends {now, n}.
func (l *Limit) slidingLog(r *tierResult, log []logEntry, now, n int64) (expired int) {
	*r = tierResult{}
	if len(log) > 0 {
		now = max(now, log[len(log)-1].t)
	}
	for expired < len(log) && log[expired].t <= now-l.window {
		expired++
	}
	live := log[expired:]
	var count int64
	for _, e := range live {
		count += e.n
	}
	r.at, r.NotBefore = now, now
	switch {
	case n > l.count:
		r.Verdict, r.RetryAfter = Excess, never
	case count+n <= l.count:
		count += n
	default:
		r.Verdict = Excess
		need := count + n - l.count
		for _, e := range live {
			need -= e.n
			if need <= 0 {
				r.RetryAfter = e.t + l.window - now
				break
			}
		}
	}
	r.Remaining = l.count - count
	switch {
	case r.Verdict == Admitted:
		r.ResetAfter = l.window
	case len(live) > 0:
		r.ResetAfter = live[len(live)-1].t + l.window - now
	}
	return expired
}

// refundResult is the state a refund leaves: next, as of now (the refund's
// time, never before the state's last update), empty again in reset ns (≤ 0:
// empty now, forget the key).
type refundResult struct {
	next       state
	now, reset int64
}

// refund gives back n units that a decision at time at took from the key's
// state st, at time now, for a rate or window algorithm. It reports false
// when there is nothing to give back: the state no longer holds the units
// (a window that has passed). The caller has validated n ≥ 1 and passes only
// keys that have state; a key without state has nothing to give back.
//
//   - leaky: in terms of the level u = e + 1 (the unit in service and the
//     excess), u ← max(0, u_now − n): exactly the state before the decision
//     if nothing else happened to the key since. The stored excess may thus
//     be −1 unit (scaled: −period), the empty level.
//   - token: tokens ← min(b, tokens_now + n).
//   - fixed: count ← max(0, count − n) if at's window is still the current
//     one.
//   - sliding window: the current or the previous count, whichever holds at's
//     window, less n (never below 0); nothing if at's window is older.
func (l *Limit) refund(r *refundResult, st state, now, at, n int64) bool {
	p, a := l.period, l.amount
	switch l.alg {
	case LeakyBucket:
		now = max(now, st.t) // a clock that stepped back: no time has passed
		u := st.x + p
		if dt := now - st.t; dt >= l.drainTime(u) {
			u = 0
		} else {
			u -= dt * a
		}
		// A consumed job's cost is at most burst + 1: capping keeps n·p
		// exact and changes nothing, as u ≤ (burst + 1)·p.
		u = max(0, u-min(n, l.burst+1)*p)
		*r = refundResult{next: state{x: u - p, t: now}, now: now, reset: l.drainTime(u)}
	case TokenBucket:
		now = max(now, st.t)
		full := l.burst * p
		k := st.x
		if dt := now - st.t; dt >= l.drainTime(full-k) {
			k = full
		} else {
			k += dt * a
		}
		k = min(full, k+min(n, l.burst)*p)
		*r = refundResult{next: state{x: k, t: now}, now: now, reset: l.drainTime(full - k)}
	case FixedWindow:
		w := l.window
		if st.t != at-floorMod(at, w) || now-floorMod(now, w) > st.t {
			return false // the job's window has passed: its units count no more
		}
		now = max(now, st.t)
		count := max(0, st.x-n)
		*r = refundResult{next: state{x: count, t: st.t}, now: now}
		if count > 0 {
			r.reset = st.t + w - now
		}
	default:
		w := l.window
		var start, c, pc int64 // current and previous counts as of now
		start, now, c, pc = slidingState(st, now, w)
		switch at - floorMod(at, w) {
		case start:
			c = max(0, c-n)
		case start - w:
			pc = max(0, pc-n)
		default:
			return false // older: the job's units weigh nothing any more
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
