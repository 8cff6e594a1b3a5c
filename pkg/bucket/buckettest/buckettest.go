// Package buckettest is the conformance suite every bucket.Store passes.
//
// A store's test calls Exercise with a constructor; the suite drives the
// store's clock itself, so a store under test must read the given clock
// function for every decision (memory: bucket.WithClock; Redis:
// redisbucket.WithClock):
//
//	func TestConformance(t *testing.T) {
//		buckettest.Exercise(t, func(t *testing.T, clock func() time.Time) bucket.Store {
//			s, err := bucket.NewMemory(bucket.WithClock(clock))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The scenarios read as timelines: nginx limit_req's documented behaviour
// (rate only; burst; burst with nodelay; two-stage burst with delay), each
// algorithm's edges, costs, all-or-nothing tiers, concurrency, refunds
// (Decision.Refund gives a refused job's units back), and a randomised
// comparison with the pure algorithm (bucket.Limit.Decide and Refund).
package buckettest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// NewStore returns a new, empty store that reads clock for every decision.
// Stores that share a server must isolate themselves (a random key prefix).
type NewStore func(t *testing.T, clock func() time.Time) bucket.Store

// Base is the time scenarios start at: aligned to the hour, so that fixed
// and sliding windows start with the scenario.
var Base = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// Clock is a manual clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (also backwards).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Arrival is one job of a timeline and what the store must answer.
type Arrival struct {
	At   time.Duration // since the timeline's start
	Cost int64         // 0 means 1
	Key  string        // "" means "k"

	Want      bucket.Verdict
	NotBefore time.Duration // for Queued: since the start; checked when Want is Queued
	// RetryAfter, when non-zero, is checked (bucket.Never for never).
	RetryAfter time.Duration
	// Remaining, when ≥ 0 and CheckRemaining is set, is checked.
	Remaining      int64
	CheckRemaining bool
}

// Run feeds a timeline through one single-tier limit of store and checks
// every answer.
func Run(t *testing.T, store bucket.Store, clock *Clock, start time.Time, limit bucket.Limit, timeline []Arrival) {
	t.Helper()
	ctx := context.Background()
	for i, a := range timeline {
		key, cost := a.Key, a.Cost
		if key == "" {
			key = "k"
		}
		if cost == 0 {
			cost = 1
		}
		now := start.Add(a.At)
		clock.Set(now)
		d, err := store.Decide(ctx, "g", []bucket.Tier{{Key: key, Limit: limit}}, cost)
		if err != nil {
			t.Fatalf("arrival %d (%v, cost %d, key %q): %v", i+1, a.At, cost, key, err)
		}
		where := fmt.Sprintf("arrival %d at +%v (cost %d, key %q, %s)", i+1, a.At, cost, key, limit)
		if d.Verdict != a.Want {
			t.Fatalf("%s: verdict %s, want %s (decision %+v)", where, d.Verdict, a.Want, d)
		}
		if !d.At.Equal(now) {
			t.Errorf("%s: At %v, want the clock's %v", where, d.At, now)
		}
		wantNB := now
		if a.Want == bucket.Queued {
			wantNB = start.Add(a.NotBefore)
		}
		if a.Want != bucket.Excess && !d.NotBefore.Equal(wantNB) {
			t.Errorf("%s: NotBefore +%v, want +%v", where, d.NotBefore.Sub(start), wantNB.Sub(start))
		}
		if a.RetryAfter != 0 && d.RetryAfter != a.RetryAfter {
			t.Errorf("%s: RetryAfter %v, want %v", where, d.RetryAfter, a.RetryAfter)
		}
		if a.Want < bucket.Excess && d.RetryAfter != 0 {
			t.Errorf("%s: RetryAfter %v on an accepted job, want 0", where, d.RetryAfter)
		}
		if a.CheckRemaining && d.Remaining != a.Remaining {
			t.Errorf("%s: Remaining %d, want %d", where, d.Remaining, a.Remaining)
		}
		if want := consumedBy(a.Want); d.Consumed != want {
			t.Errorf("%s: Consumed %b, want %b", where, d.Consumed, want)
		}
	}
}

// consumedBy is the Consumed of a single-tier decision with verdict v.
func consumedBy(v bucket.Verdict) uint8 {
	if v <= bucket.Queued {
		return 1
	}
	return 0
}

func must(t *testing.T, spec bucket.Spec) bucket.Limit {
	t.Helper()
	l, err := spec.Build()
	if err != nil {
		t.Fatalf("limit %+v: %v", spec, err)
	}
	return l
}

// repeat returns n arrivals at the same offset with verdicts from f(k), k
// counting from 1.
func repeat(n int, at time.Duration, f func(k int) Arrival) []Arrival {
	out := make([]Arrival, 0, n)
	for k := 1; k <= n; k++ {
		a := f(k)
		a.At = at
		out = append(out, a)
	}
	return out
}

// atOnce returns n arrivals at the start: the first admitted pass, the
// next queued wait one spacing apart (the first of them one spacing after
// the start), and the rest are rejected, with retryAfter checked when it is
// not zero.
func atOnce(n, admitted, queued int, spacing, retryAfter time.Duration) []Arrival {
	return repeat(n, 0, func(k int) Arrival {
		switch {
		case k <= admitted:
			return Arrival{Want: A}
		case k <= admitted+queued:
			return Arrival{Want: Q, NotBefore: time.Duration(k-admitted) * spacing}
		default:
			return Arrival{Want: R, RetryAfter: retryAfter}
		}
	})
}

const (
	A = bucket.Admitted
	Q = bucket.Queued
	X = bucket.Excess
	R = bucket.Rejected
)

// concurrently runs f(g) in n goroutines, g from 0, and fails t with the
// errors they return once all are done.
func concurrently(t *testing.T, n int, f func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			if err := f(g); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// setupFunc makes a store for one test, and the clock the store reads.
type setupFunc func(t *testing.T) (bucket.Store, *Clock)

// parallel runs f as a parallel subtest of t, with a store and clock of
// its own.
func (setup setupFunc) parallel(t *testing.T, name string, f func(t *testing.T, store bucket.Store, clock *Clock)) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		store, clock := setup(t)
		f(t, store, clock)
	})
}

// eachLimit runs, as a parallel subtest name of t, f once per spec, each in
// a subtest of its own with a store and clock of its own and a random
// source seeded by the spec's index and seed.
func (setup setupFunc) eachLimit(t *testing.T, name string, seed uint64, specs []bucket.Spec,
	f func(t *testing.T, store bucket.Store, clock *Clock, l bucket.Limit, rng *rand.Rand),
) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		for si, spec := range specs {
			l := must(t, spec)
			t.Run(l.String(), func(t *testing.T) {
				store, clock := setup(t)
				f(t, store, clock, l, rand.New(rand.NewPCG(uint64(si), seed)))
			})
		}
	})
}

// decideTwins decides arrival i, a job of cost at the store's clock now, on
// key "with" of l, then on key "without", and fails unless both get the
// same answer to the nanosecond: with says what key "with" saw more,
// without what "without" saw instead.
func decideTwins(t *testing.T, store bucket.Store, l bucket.Limit, i int, now time.Time, cost int64, with, without string) {
	t.Helper()
	ctx := context.Background()
	a, err := store.Decide(ctx, "g", one("with", l), cost)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.Decide(ctx, "g", one("without", l), cost)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(a, b) {
		t.Fatalf("arrival %d (+%v, cost %d): %s %+v\n%s %+v", i, now.Sub(Base), cost, with, a, without, b)
	}
}

// one is the single tier of key key under l.
func one(key string, l bucket.Limit) []bucket.Tier { return []bucket.Tier{{Key: key, Limit: l}} }

// Exercise runs the whole suite against stores made by newStore.
func Exercise(t *testing.T, newStore NewStore) {
	setup := setupFunc(func(t *testing.T) (bucket.Store, *Clock) {
		t.Helper()
		c := NewClock(Base)
		return newStore(t, c.Now), c
	})
	scenario := func(name string, spec bucket.Spec, timeline func() []Arrival) {
		setup.parallel(t, name, func(t *testing.T, store bucket.Store, clock *Clock) {
			Run(t, store, clock, Base, must(t, spec), timeline())
		})
	}

	// nginx: limit_req_zone rate=1r/s; limit_req (no burst): one request a
	// second, the rest rejected.
	scenario("nginx/rate_only", bucket.Spec{Rate: "1r/s"}, func() []Arrival {
		return []Arrival{
			{At: 0, Want: A, Remaining: 0, CheckRemaining: true},
			{At: 0, Want: R, RetryAfter: time.Second},
			{At: 999 * time.Millisecond, Want: R, RetryAfter: time.Millisecond},
			{At: time.Second, Want: A},
			{At: 1500 * time.Millisecond, Want: R, RetryAfter: 500 * time.Millisecond},
			{At: 2 * time.Second, Want: A},
			{At: 10 * time.Second, Want: A},
		}
	})
	// nginx documentation: rate=1r/s, burst=5: ten requests at once, one
	// passes, five are delayed one second apart, four get 503.
	scenario("nginx/burst", bucket.Spec{Rate: "1r/s", Burst: 5}, func() []Arrival {
		return repeat(10, 0, func(k int) Arrival {
			switch {
			case k == 1:
				return Arrival{Want: A, Remaining: 5, CheckRemaining: true}
			case k <= 6:
				return Arrival{Want: Q, NotBefore: time.Duration(k-1) * time.Second, Remaining: int64(6 - k), CheckRemaining: true}
			default:
				return Arrival{Want: R, RetryAfter: time.Second}
			}
		})
	})
	// nginx: rate=10r/s burst=20 nodelay: 21 at once pass, then one slot
	// frees every 100 ms.
	scenario("nginx/burst_nodelay", bucket.Spec{Rate: "10r/s", Burst: 20, NoDelay: true}, func() []Arrival {
		tl := repeat(21, 0, func(int) Arrival { return Arrival{Want: A} })
		return append(tl,
			Arrival{At: 0, Want: R, RetryAfter: 100 * time.Millisecond},
			Arrival{At: 50 * time.Millisecond, Want: R, RetryAfter: 50 * time.Millisecond},
			Arrival{At: 100 * time.Millisecond, Want: A},
			Arrival{At: 100 * time.Millisecond, Want: R},
			Arrival{At: 300 * time.Millisecond, Want: A},
			Arrival{At: 300 * time.Millisecond, Want: A},
			Arrival{At: 300 * time.Millisecond, Want: R},
		)
	})
	// nginx two-stage rate limiting: rate=5r/s burst=12 delay=8: excess up
	// to 8 passes at once, up to 12 is delayed to keep 5 r/s, beyond is
	// rejected. (nginx compares the excess before counting the request in
	// service, so 9 pass, 4 wait, the 14th is rejected.)
	scenario("nginx/two_stage", bucket.Spec{Rate: "5r/s", Burst: 12, Delay: 8}, func() []Arrival {
		return atOnce(15, 9, 4, 200*time.Millisecond, 200*time.Millisecond)
	})
	// The end-to-end check of the running system: 40 at once at rate 1/s,
	// burst 20, delay 5 → 6 admitted, 15 queued, 19 rejected.
	scenario("leaky/burst20_delay5", bucket.Spec{Rate: "1/s", Burst: 20, Delay: 5}, func() []Arrival {
		return atOnce(40, 6, 15, time.Second, 0)
	})
	// Steady arrivals exactly at the rate never build excess.
	scenario("leaky/at_rate", bucket.Spec{Rate: "4/s"}, func() []Arrival {
		var tl []Arrival
		for i := range 12 {
			tl = append(tl, Arrival{At: time.Duration(i) * 250 * time.Millisecond, Want: A})
		}
		return append(tl, Arrival{At: 11*250*time.Millisecond + 249*time.Millisecond, Want: R, RetryAfter: time.Millisecond})
	})
	// A rate that does not divide a second: 3/s. Times round up, never early.
	scenario("leaky/rate_3_per_s", bucket.Spec{Rate: "3/s", Burst: 2}, func() []Arrival {
		return []Arrival{
			{At: 0, Want: A},
			{At: 0, Want: Q, NotBefore: 333333334},
			{At: 0, Want: Q, NotBefore: 666666667},
			{At: 0, Want: R, RetryAfter: 333333334},
			{At: 333333333, Want: R, RetryAfter: 1},
			{At: 333333334, Want: Q, NotBefore: 1000000000},
		}
	})
	// Costs: a job of cost n is n unit requests at once.
	scenario("leaky/cost", bucket.Spec{Rate: "1/s", Burst: 5, NoDelay: true}, func() []Arrival {
		return []Arrival{
			{At: 0, Cost: 3, Want: A, Remaining: 3, CheckRemaining: true}, // e' = 2
			{At: 0, Cost: 4, Want: R, RetryAfter: time.Second},            // e' would be 6
			{At: time.Second, Cost: 4, Want: A},                           // max(0, 2−1+1)+3 = 5
			{At: time.Second, Cost: 7, Want: R, RetryAfter: bucket.Never}, // more than burst+1: never
			// A long idle key decides as a new key: e' = n − 1.
			{At: time.Hour, Cost: 6, Want: A, Remaining: 0, CheckRemaining: true},
			{At: time.Hour, Want: R},
		}
	})

	scenario("token/basic", bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 3}, func() []Arrival {
		return []Arrival{
			{At: 0, Want: A, Remaining: 2, CheckRemaining: true},
			{At: 0, Want: A},
			{At: 0, Want: A, Remaining: 0, CheckRemaining: true},
			{At: 0, Want: X, RetryAfter: time.Second},
			{At: time.Second, Want: A},
			{At: 1500 * time.Millisecond, Want: X, RetryAfter: 500 * time.Millisecond},
			{At: 1500 * time.Millisecond, Cost: 4, Want: X, RetryAfter: bucket.Never},
			{At: 10 * time.Second, Cost: 3, Want: A},
			{At: 10 * time.Second, Cost: 2, Want: X, RetryAfter: 2 * time.Second},
		}
	})
	scenario("fixed/basic", bucket.Spec{Algorithm: "fixed_window", Limit: 2, Window: "10s"}, func() []Arrival {
		return []Arrival{
			{At: 0, Want: A, Remaining: 1, CheckRemaining: true},
			{At: 0, Want: A},
			{At: 0, Want: X, RetryAfter: 10 * time.Second},
			{At: 10*time.Second - 1, Want: X, RetryAfter: 1},
			{At: 10 * time.Second, Cost: 2, Want: A},
			{At: 19 * time.Second, Want: X, RetryAfter: time.Second},
			{At: 20 * time.Second, Cost: 3, Want: X, RetryAfter: bucket.Never},
			{At: 25 * time.Second, Want: A},
		}
	})
	scenario("sliding_log/basic", bucket.Spec{Algorithm: "sliding_log", Limit: 2, Window: "10s"}, func() []Arrival {
		return []Arrival{
			{At: 0, Want: A},
			{At: 5 * time.Second, Want: A, Remaining: 0, CheckRemaining: true},
			{At: 9 * time.Second, Want: X, RetryAfter: time.Second},
			{At: 10 * time.Second, Want: A}, // the entry of 0s left at 10s
			{At: 14 * time.Second, Want: X, RetryAfter: time.Second},
			{At: 14 * time.Second, Cost: 2, Want: X, RetryAfter: 6 * time.Second},
			{At: 15 * time.Second, Want: A},
			{At: 15 * time.Second, Cost: 3, Want: X, RetryAfter: bucket.Never},
		}
	})
	scenario("sliding_window/basic", bucket.Spec{Algorithm: "sliding_window", Limit: 10, Window: "10s"}, func() []Arrival {
		tl := repeat(10, 0, func(int) Arrival { return Arrival{Want: A} })
		tl = append(tl, Arrival{At: 0, Want: X, RetryAfter: 11 * time.Second})
		// At 10s the previous window weighs fully: 10·10 + 1·10 > 100.
		tl = append(tl, Arrival{At: 10 * time.Second, Want: X, RetryAfter: time.Second})
		// At 15s half of it: 10·5 + (c+1)·10 ≤ 100 → five more.
		tl = append(tl, repeat(5, 15*time.Second, func(int) Arrival { return Arrival{Want: A} })...)
		return append(tl,
			Arrival{At: 15 * time.Second, Want: X, RetryAfter: time.Second},
			Arrival{At: 16 * time.Second, Want: A},
			// A window later the previous count is 6: 6·(10−el)+(0+5)·10 ≤ 100 ok at el=2.
			Arrival{At: 22 * time.Second, Cost: 5, Want: A},
			Arrival{At: 40 * time.Second, Cost: 10, Want: A},
			Arrival{At: 40 * time.Second, Cost: 11, Want: X, RetryAfter: bucket.Never},
		)
	})

	setup.parallel(t, "keys_and_groups_are_isolated", func(t *testing.T, store bucket.Store, _ *Clock) {
		l := must(t, bucket.Spec{Rate: "1/s"})
		ctx := context.Background()
		for _, c := range []struct {
			group, key string
			want       bucket.Verdict
		}{{"g", "a", A}, {"g", "a", R}, {"g", "b", A}, {"h", "a", A}, {"h", "a", R}, {"g", "b", R}} {
			d, err := store.Decide(ctx, c.group, []bucket.Tier{{Key: c.key, Limit: l}}, 1)
			if err != nil || d.Verdict != c.want {
				t.Fatalf("group %q key %q: %v %v, want %v", c.group, c.key, d.Verdict, err, c.want)
			}
		}
	})

	setup.parallel(t, "tiers_all_or_nothing", func(t *testing.T, store bucket.Store, clock *Clock) {
		tiers := []bucket.Tier{
			{Key: "0:client", Limit: must(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 2})},
			{Key: "1:global", Limit: must(t, bucket.Spec{Rate: "1/s"})},
		}
		steps := []struct {
			at        time.Duration
			want      bucket.Verdict
			tier      int
			remaining int64
		}{
			{0, A, 1, 0},           // tokens 2→1, leaky e'=0: the leaky tier has fewer left
			{0, R, 1, 0},           // leaky rejects: the token tier must not pay
			{time.Second, A, 0, 0}, // tokens 1→0: only true if the rejected job took nothing
			{2 * time.Second, X, 0, 0},
		}
		for i, s := range steps {
			clock.Set(Base.Add(s.at))
			d, err := store.Decide(context.Background(), "g", tiers, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != s.want || d.Tier != s.tier || d.Remaining != s.remaining {
				t.Fatalf("step %d: %s tier %d remaining %d, want %s tier %d remaining %d", i, d.Verdict, d.Tier, d.Remaining, s.want, s.tier, s.remaining)
			}
		}
	})

	setup.parallel(t, "tiers_worst_verdict_latest_not_before", func(t *testing.T, store bucket.Store, _ *Clock) {
		tiers := []bucket.Tier{
			{Key: "a", Limit: must(t, bucket.Spec{Rate: "1/s", Burst: 10})},   // queues 1 s per job
			{Key: "b", Limit: must(t, bucket.Spec{Rate: "2/s", Burst: 10})},   // queues 0.5 s per job
			{Key: "c", Limit: must(t, bucket.Spec{Rate: "100/s", Burst: 10})}, // queues 10 ms per job
		}
		for k := 1; k <= 3; k++ {
			d, err := store.Decide(context.Background(), "g", tiers, 1)
			if err != nil {
				t.Fatal(err)
			}
			want, wantNB := A, Base
			if k > 1 {
				want, wantNB = Q, Base.Add(time.Duration(k-1)*time.Second)
			}
			if d.Verdict != want || !d.NotBefore.Equal(wantNB) || d.Tier != 0 {
				t.Fatalf("job %d: %s not before +%v tier %d, want %s +%v tier 0", k, d.Verdict, d.NotBefore.Sub(Base), d.Tier, want, wantNB.Sub(Base))
			}
		}
	})

	t.Run("clock_stepping_back_grants_nothing", func(t *testing.T) {
		t.Parallel()
		for _, spec := range allSpecs() {
			store, clock := setup(t)
			l := must(t, spec)
			ctx := context.Background()
			tier := []bucket.Tier{{Key: "k", Limit: l}}
			clock.Set(Base.Add(time.Minute))
			accepted := 0
			for i := range 200 {
				clock.Set(Base.Add(time.Minute - time.Duration(i)*time.Second)) // going back
				d, err := store.Decide(ctx, "g", tier, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Verdict <= Q {
					accepted++
				}
			}
			if max := int(l.Quota()); accepted > max {
				t.Errorf("%s: a clock going back got %d jobs accepted, want ≤ %d", l, accepted, max)
			}
		}
	})

	t.Run("concurrent_callers_get_exactly_the_quota", func(t *testing.T) {
		t.Parallel()
		for _, spec := range allSpecs() {
			store, _ := setup(t) // the clock stands still
			l := must(t, spec)
			var accepted atomic.Int64
			concurrently(t, 32, func(int) error {
				for range 40 {
					d, err := store.Decide(context.Background(), "g", []bucket.Tier{{Key: "hot", Limit: l}}, 1)
					if err != nil {
						return err
					}
					if d.Verdict <= Q {
						accepted.Add(1)
					}
				}
				return nil
			})
			if got, want := accepted.Load(), l.Quota(); got != want {
				t.Errorf("%s: 1280 concurrent jobs at one instant: %d accepted, want exactly %d", l, got, want)
			}
		}
	})

	setup.parallel(t, "bad_requests", func(t *testing.T, store bucket.Store, _ *Clock) {
		ok := must(t, bucket.Spec{Rate: "1/s"})
		ctx := context.Background()
		cases := []struct {
			name  string
			tiers []bucket.Tier
			cost  int64
			want  error
		}{
			{"zero cost", []bucket.Tier{{Key: "k", Limit: ok}}, 0, bucket.ErrInvalidCost},
			{"negative cost", []bucket.Tier{{Key: "k", Limit: ok}}, -3, bucket.ErrInvalidCost},
			{"zero limit", []bucket.Tier{{Key: "k"}}, 1, bucket.ErrInvalidLimit},
			{"no tiers", nil, 1, bucket.ErrTooManyTiers},
			{"nine tiers", make([]bucket.Tier, 9), 1, bucket.ErrTooManyTiers},
			{"duplicate keys", []bucket.Tier{{Key: "k", Limit: ok}, {Key: "k", Limit: ok}}, 1, bucket.ErrDuplicateKey},
		}
		for _, c := range cases {
			if _, err := store.Decide(ctx, "g", c.tiers, c.cost); !errors.Is(err, c.want) {
				t.Errorf("%s: error %v, want %v", c.name, err, c.want)
			}
		}
	})

	t.Run("agrees_with_the_pure_algorithm", func(t *testing.T) {
		t.Parallel()
		for si, spec := range append(allSpecs(),
			bucket.Spec{Rate: "7/3s", Burst: 4, Delay: 1},
			bucket.Spec{Algorithm: "token_bucket", Rate: "3/s", Burst: 5},
			bucket.Spec{Algorithm: "fixed_window", Limit: 5, Window: "1500ms"},
			bucket.Spec{Algorithm: "sliding_window", Limit: 7, Window: "700ms"},
			bucket.Spec{Algorithm: "sliding_log", Limit: 4, Window: "333ms"},
		) {
			l := must(t, spec)
			store, clock := setup(t)
			rng := rand.New(rand.NewPCG(uint64(si), 42))
			pure := map[string]*bucket.Bucket{}
			// Start off the hour, at an odd nanosecond.
			now := Base.Add(123456789)
			for i := range 300 {
				now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
				if rng.IntN(10) == 0 {
					now = now.Add(time.Duration(rng.Int64N(int64(10 * time.Second))))
				}
				key := fmt.Sprint("k", rng.IntN(3))
				cost := 1 + rng.Int64N(3)
				if pure[key] == nil {
					pure[key] = new(bucket.Bucket)
				}
				want, err := l.Decide(pure[key], now, cost)
				if err != nil {
					t.Fatal(err)
				}
				clock.Set(now)
				got, err := store.Decide(context.Background(), "g", []bucket.Tier{{Key: key, Limit: l}}, cost)
				if err != nil {
					t.Fatal(err)
				}
				if !equal(got, want) {
					t.Fatalf("%s, arrival %d (+%v key %s cost %d):\n store %+v\n  pure %+v", l, i, now.Sub(Base), key, cost, got, want)
				}
				if got.Consumed == 0 || rng.IntN(4) != 0 {
					continue
				}
				// Give the job back, now or a little later, in both.
				now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				if err := l.Refund(pure[key], now, got.At, cost); err != nil {
					t.Fatal(err)
				}
				clock.Set(now)
				if err := got.Refund(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	exerciseRefund(t, setup)
	exerciseSettle(t, setup)
}

func equal(a, b bucket.Decision) bool {
	return a.Verdict == b.Verdict && a.At.Equal(b.At) && a.NotBefore.Equal(b.NotBefore) && a.Tier == b.Tier &&
		a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter &&
		a.Consumed == b.Consumed
}

// allSpecs is one limit of each algorithm with a quota of 10 at one instant.
func allSpecs() []bucket.Spec {
	return []bucket.Spec{
		{Rate: "1/s", Burst: 9, Delay: 3},
		{Algorithm: "token_bucket", Rate: "1/s", Burst: 10},
		{Algorithm: "fixed_window", Limit: 10, Window: "1h"},
		{Algorithm: "sliding_log", Limit: 10, Window: "1h"},
		{Algorithm: "sliding_window", Limit: 10, Window: "1h"},
	}
}
