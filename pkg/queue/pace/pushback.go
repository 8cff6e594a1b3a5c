package pace

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Pushback's parameters (docs/design.md#pushback).
const (
	// DefaultPushbackPause is how long a pushback without a Retry-After
	// pauses the leak.
	DefaultPushbackPause = time.Second
	// MaxPushbackPause caps one pushback's pause, whatever Retry-After
	// said.
	MaxPushbackPause = time.Minute
	// LeakClimb is how long an adaptive leak takes to climb back from a
	// cut to the rate the pushback came at. It climbs fast at first and
	// slows as it nears that rate, where it stays longest.
	LeakClimb = 10 * time.Second
	// LeakProbe is how long, after LeakClimb, the leak takes to probe from
	// the rate the pushback came at up to the maximum: slowly at first.
	LeakProbe = 30 * time.Second
	// leakCutNum/leakCutDen is the factor a pushback cuts the rate by.
	leakCutNum, leakCutDen = 7, 10
	// leakCutHoldoff: a pushback cuts the rate again only once the last
	// pause has been over this long, so that the answers of the jobs
	// started before it (the same overload) count once.
	leakCutHoldoff = 250 * time.Millisecond
	// leakHoldBooked: Reserve waits for a booked start this close itself,
	// so that a pause that begins meanwhile holds it back too; a later
	// start is returned as a wait, as the pacer booked it.
	leakHoldBooked = time.Second
	// leakFresh is how stale a worker's copy of the shared state may get
	// before Reserve reads it again.
	leakFresh = 50 * time.Millisecond
)

// milli is one start per second in the unit LeakState's rates use
// (thousandths of a start per second), per nanosecond: 10^12.
const milli = 1_000_000_000_000

// LeakState is a queue's pushback state, shared by all its workers: the
// leak's pause, and the adaptive leak's last cut. The rate at any moment
// is a function of it and of the time (Rate), so nothing needs writing
// while the rate climbs back. The zero value is a leak never pushed back.
type LeakState struct {
	// PausedUntil: no backlog start is booked before it.
	PausedUntil time.Time
	// CutAt is when the adaptive leak was last cut (zero: never).
	CutAt time.Time
	// From is the rate when that pushback came and To the rate it was cut
	// to, in thousandths of a start per second.
	From, To int64
}

// MilliRate is r in thousandths of a start per second, at least 1.
func MilliRate(r bucket.Rate) int64 {
	if r.Count <= 0 || r.Per <= 0 {
		return 0
	}
	return max(1, mulDiv(r.Count, milli, int64(r.Per)))
}

// LeakFloor is the lowest rate an adaptive leak of maximum r is cut to,
// in thousandths of a start per second: r/100, but not below 1/s (nor
// above r).
func LeakFloor(r bucket.Rate) int64 {
	m := MilliRate(r)
	return min(m, max(m/100, 1000))
}

// Rate is the leak's rate at now, in thousandths of a start per second,
// for a queue whose leak_rate is maxRate: maxRate itself unless adaptive
// and cut. After a cut it climbs from To back to From over LeakClimb, fast
// at first and flattening near From — r = From − (From−To)·(1−τ/C)² —
// then probes above From, slowly at first, reaching maxRate after
// LeakProbe more: r = From + (max−From)·((τ−C)/P)².
func (s LeakState) Rate(now time.Time, maxRate bucket.Rate, adaptive bool) int64 {
	m := MilliRate(maxRate)
	if !adaptive || s.CutAt.IsZero() || m == 0 {
		return m
	}
	floor := LeakFloor(maxRate)
	from := max(min(s.From, m), floor)
	to := max(min(s.To, from), floor)
	tau := max(now.Sub(s.CutAt), 0)
	if tau < LeakClimb {
		left := int64(LeakClimb-tau) / int64(time.Millisecond)
		climb := int64(LeakClimb) / int64(time.Millisecond)
		return from - mulDiv(mulDiv(from-to, left, climb), left, climb)
	}
	tau -= LeakClimb
	if tau >= LeakProbe {
		return m
	}
	gone := int64(tau) / int64(time.Millisecond)
	probe := int64(LeakProbe) / int64(time.Millisecond)
	return from + mulDiv(mulDiv(m-from, gone, probe), gone, probe)
}

// pushed is the state after a pushback at now asking for a pause of
// pause, for a leak at rate (milli) between floor and its maximum: the
// pause extended to now+pause; if adaptive, the rate cut to 7/10 of rate —
// unless the last pause ended less than leakCutHoldoff ago, when this
// pushback answers a start made at the old cut's rate or before it.
// started reports whether the leak was not paused before.
func (s LeakState) pushed(now time.Time, pause time.Duration, rate, floor int64, adaptive bool) (next LeakState, started bool) {
	next = s
	started = !s.PausedUntil.After(now)
	if until := now.Add(pause); until.After(next.PausedUntil) {
		next.PausedUntil = until
	}
	if adaptive && (s.CutAt.IsZero() || !now.Before(s.PausedUntil.Add(leakCutHoldoff))) {
		next.CutAt = now
		next.From = rate
		next.To = max(floor, mulDiv(rate, leakCutNum, leakCutDen))
	}
	return next, started
}

// mulDiv is a·b/c rounded down, in 128 bits; a, b ≥ 0 and c > 0.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, 1<<63-1))
}

// rateOf is the bucket.Rate a pacer books at for milli thousandths of a
// start per second: maxRate itself when milli is its rate, else one start
// every ⌈10^12/milli⌉ ns, which a StorePacer and a KVPacer keep exactly.
func rateOf(m int64, maxRate bucket.Rate) bucket.Rate {
	if m >= MilliRate(maxRate) {
		return maxRate
	}
	m = max(m, 1)
	return bucket.Rate{Count: 1, Per: time.Duration((milli + m - 1) / m)}
}

// LeakStateKey is the key of a queue's LeakState in the pacers' bucket
// (PacerBucket), next to its chain of starts.
func LeakStateKey(q string) string { return q + ".pushback" }

// ReadLeakState reads a queue's shared pushback state from the pacers'
// bucket: the zero LeakState if it was never pushed back.
func ReadLeakState(ctx context.Context, kv jetstream.KeyValue, q string) (LeakState, error) {
	st, _, err := loadLeak(ctx, kv, LeakStateKey(q))
	return st, err
}

func loadLeak(ctx context.Context, kv jetstream.KeyValue, key string) (LeakState, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return LeakState{}, 0, nil
	}
	if err != nil {
		return LeakState{}, 0, fmt.Errorf("pace: leak state %s: %w", key, err)
	}
	st, err := DecodeLeak(e.Value())
	if err != nil {
		return LeakState{}, e.Revision(), nil // unreadable: written over
	}
	return st, e.Revision(), nil
}

// encode writes the state as "paused_until cut_at from to", decimal unix
// ns and thousandths of a start per second.
func (s LeakState) encode() []byte {
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, unixNano(s.PausedUntil), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, unixNano(s.CutAt), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.From, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.To, 10)
	return b
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func DecodeLeak(b []byte) (LeakState, error) {
	f := strings.Fields(string(b))
	if len(f) != 4 {
		return LeakState{}, fmt.Errorf("pace: leak state %q: want 4 fields", b)
	}
	var v [4]int64
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return LeakState{}, fmt.Errorf("pace: leak state %q: field %d: want an integer ≥ 0", b, i+1)
		}
		v[i] = n
	}
	return LeakState{PausedUntil: fromUnixNano(v[0]), CutAt: fromUnixNano(v[1]), From: v[2], To: v[3]}, nil
}

// RatePacer is a Pacer whose rate can change: StorePacer, KVPacer,
// FailoverPacer.
type RatePacer interface {
	Pacer
	SetRate(bucket.Rate) error
}

// Yielder is a Pacer that a worker tells when a handler's downstream
// pushed back (retry.IsPushback). A Worker whose Pacer is not a Yielder
// ignores pushback.
type Yielder interface {
	Pacer
	// Yield pauses the queue's leak for after (0: DefaultPushbackPause;
	// capped at MaxPushbackPause) on every worker, and cuts an adaptive
	// leak's rate.
	Yield(ctx context.Context, after time.Duration) error
}

// YieldingPacer is a Pacer that yields to the downstream: it books its
// starts with another pacer, and a pushback from any worker pauses them
// and, if adaptive, cuts their rate (docs/design.md#pushback). The state
// is shared by every worker in a key-value entry of the pacers' bucket
// (LeakStateKey), written only at a pushback: the rate climbs back as a
// function of the time since the cut, with nothing written.
//
// Every worker reads the entry at most leakFresh (50ms) after another
// wrote it — at its next booking — so a pause is in force everywhere
// within that. Reserve waits for a start booked less than a second ahead
// itself and returns 0, then looks at the pause again: a start booked
// before a pause but due during it is let go unused and booked after the
// pause. A YieldingPacer is safe for concurrent use. Reserve and Yield
// are the methods callers want.
type YieldingPacer struct {
	inner    RatePacer
	kv       jetstream.KeyValue // nil: the state is this process's alone
	key      string
	maxRate  atomic.Pointer[bucket.Rate]
	adaptive atomic.Bool
	now      func() time.Time
	fresh    time.Duration

	pauses atomic.Uint64

	mu      sync.Mutex
	state   LeakState
	readAt  time.Time
	applied bucket.Rate // the rate last given to inner
}

// NewYieldingPacer paces queue with inner, whose rate it sets: maxRate,
// or below it while an adaptive leak climbs back from a pushback. kv is
// the pacers' bucket (OpenPacerBucket) where every worker shares the
// pushback state; nil keeps it in this process.
func NewYieldingPacer(inner RatePacer, kv jetstream.KeyValue, q string, maxRate bucket.Rate, adaptive bool) (*YieldingPacer, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: yielding pacer: nil pacer", queue.ErrInvalidConfig)
	}
	if err := spillway.ValidateQueueName(q); err != nil {
		return nil, fmt.Errorf("%w: pacer: %w", queue.ErrInvalidConfig, err)
	}
	p := &YieldingPacer{inner: inner, kv: kv, key: LeakStateKey(q), now: time.Now, fresh: leakFresh}
	if err := p.SetRate(maxRate); err != nil {
		return nil, fmt.Errorf("%w: queue %s: %w", queue.ErrInvalidConfig, q, err)
	}
	p.adaptive.Store(adaptive)
	return p, nil
}

// SetRate changes the leak's maximum rate from the next booking on.
func (p *YieldingPacer) SetRate(rate bucket.Rate) error {
	if _, err := bucket.NewLeakyBucket(rate, 1, 0); err != nil {
		return fmt.Errorf("leak_rate: %w", err)
	}
	p.maxRate.Store(&rate)
	return nil
}

// SetAdaptive turns the adaptive leak on or off from the next booking on.
func (p *YieldingPacer) SetAdaptive(on bool) { p.adaptive.Store(on) }

// Pauses counts the pauses this process began (a pushback while the leak
// was not paused); the sum over all workers is the queue's.
func (p *YieldingPacer) Pauses() uint64 { return p.pauses.Load() }

// Current is the leak's rate now, in thousandths of a start per second,
// and the end of its pause (zero or past: not paused), as this process
// last read them. It does no I/O.
func (p *YieldingPacer) Current() (milliRate int64, pausedUntil time.Time) {
	p.mu.Lock()
	st := p.state
	p.mu.Unlock()
	return st.Rate(p.now(), *p.maxRate.Load(), p.adaptive.Load()), st.PausedUntil
}

// Reserve books the next start: after the pause, if one is in force, and
// at the current rate.
func (p *YieldingPacer) Reserve(ctx context.Context) (time.Duration, error) {
	return p.reserve(ctx, true)
}

// Book books the next start as Reserve does, but returns at once with the
// wait instead of waiting for a start due within a second and looking at
// the pause again: for a caller that looks at the pause itself at the
// start (PausedUntil), such as the drain's leader, which books a start
// ahead so that the chain of starts stays unbroken while it grants it.
func (p *YieldingPacer) Book(ctx context.Context) (time.Duration, error) {
	return p.reserve(ctx, false)
}

// PausedUntil is the end of the leak's pause, from a copy of the shared
// state at most fresh old; zero or past when the leak is not paused.
func (p *YieldingPacer) PausedUntil(ctx context.Context) (time.Time, error) {
	st, err := p.load(ctx)
	return st.PausedUntil, err
}

func (p *YieldingPacer) reserve(ctx context.Context, hold bool) (time.Duration, error) {
	for {
		st, err := p.load(ctx)
		if err != nil {
			return 0, err
		}
		now := p.now()
		if wait := st.PausedUntil.Sub(now); wait > 0 {
			if err := loop.Sleep(ctx, wait); err != nil {
				return 0, err
			}
			p.mu.Lock()
			p.readAt = time.Time{} // the pause may have been extended
			p.mu.Unlock()
			continue
		}
		maxRate := *p.maxRate.Load()
		rate := rateOf(st.Rate(now, maxRate, p.adaptive.Load()), maxRate)
		p.mu.Lock()
		if rate != p.applied {
			if err := p.inner.SetRate(rate); err != nil {
				p.mu.Unlock()
				return 0, fmt.Errorf("pace: pacer %s: %w", p.key, err)
			}
			p.applied = rate
		}
		p.mu.Unlock()
		wait, err := p.inner.Reserve(ctx)
		if err != nil || !hold || wait <= 0 || wait > leakHoldBooked {
			return wait, err
		}
		// Wait for the booked start here and look at the pause again: a
		// pushback meanwhile (the jobs started just before it are the
		// ones that see the overload) lets the booking go unused.
		if err := loop.Sleep(ctx, wait); err != nil {
			return 0, err
		}
		st, err = p.load(ctx)
		if err != nil {
			return 0, err
		}
		if !st.PausedUntil.After(p.now()) {
			return 0, nil
		}
	}
}

// load returns the shared state, read again if this copy is older than
// fresh.
func (p *YieldingPacer) load(ctx context.Context) (LeakState, error) {
	p.mu.Lock()
	if p.kv == nil || (!p.readAt.IsZero() && p.now().Sub(p.readAt) < p.fresh) {
		defer p.mu.Unlock()
		return p.state, nil
	}
	p.mu.Unlock() // no I/O under the lock: Current must not wait for it
	at := p.now()
	st, _, err := loadLeak(ctx, p.kv, p.key)
	if err != nil {
		return LeakState{}, err
	}
	p.remember(st, at)
	return st, nil
}

// Yield pauses the leak on every worker until after from now (0:
// DefaultPushbackPause; capped at MaxPushbackPause) and, if adaptive,
// cuts its rate (LeakState).
func (p *YieldingPacer) Yield(ctx context.Context, after time.Duration) error {
	if after <= 0 {
		after = DefaultPushbackPause
	}
	after = min(after, MaxPushbackPause)
	maxRate := *p.maxRate.Load()
	adaptive := p.adaptive.Load()
	floor := LeakFloor(maxRate)
	if p.kv == nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		now := p.now()
		next, started := p.state.pushed(now, after, p.state.Rate(now, maxRate, adaptive), floor, adaptive)
		p.state = next
		if started {
			p.pauses.Add(1)
		}
		return nil
	}
	for {
		st, rev, err := loadLeak(ctx, p.kv, p.key)
		if err != nil {
			return err
		}
		now := p.now()
		next, started := st.pushed(now, after, st.Rate(now, maxRate, adaptive), floor, adaptive)
		if next == st {
			p.remember(st, now)
			return nil
		}
		if rev == 0 {
			_, err = p.kv.Create(ctx, p.key, next.encode())
		} else {
			_, err = p.kv.Update(ctx, p.key, next.encode(), rev)
		}
		switch {
		case err == nil:
			if started {
				p.pauses.Add(1)
			}
			p.remember(next, now)
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Another worker wrote it since we read: read again.
		default:
			return fmt.Errorf("pace: leak state %s: %w", p.key, err)
		}
	}
}

// remember keeps st, read at at, unless a newer reading is kept already.
func (p *YieldingPacer) remember(st LeakState, at time.Time) {
	p.mu.Lock()
	if !at.Before(p.readAt) {
		p.state, p.readAt = st, at
	}
	p.mu.Unlock()
}
