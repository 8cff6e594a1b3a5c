package buckettest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// exerciseSettle checks Decision.Settle and Store.Settle: a handler's
// actual cost settles the job's cost in every tier that charged it — the
// difference given back, or taken (the key's later jobs wait for it).
func exerciseSettle(t *testing.T, setup setupFunc) {
	ctx := context.Background()

	// A job of cost c settled at once at actual a ≤ c leaves the key as a
	// job of cost a decided then would (a = 0: as if never decided). Key
	// "with" gets the settled jobs, key "without" the jobs of their actual
	// cost; every later arrival gets the same answer on both.
	setup.eachLimit(t, "settle/as_if_decided_at_actual", 7, []bucket.Spec{
		{Rate: "1/s", Burst: 9, Delay: 3},
		{Algorithm: "token_bucket", Rate: "1/s", Burst: 10},
		{Algorithm: "fixed_window", Limit: 10, Window: "2s"},
		{Algorithm: "sliding_log", Limit: 10, Window: "2s"},
		{Algorithm: "sliding_window", Limit: 10, Window: "2s"},
		{Rate: "7/3s", Burst: 4, Delay: 1},
		{Algorithm: "token_bucket", Rate: "3/s", Burst: 5},
		{Algorithm: "sliding_window", Limit: 7, Window: "700ms"},
		{Algorithm: "sliding_log", Limit: 4, Window: "333ms"},
	}, func(t *testing.T, store bucket.Store, clock *Clock, l bucket.Limit, rng *rand.Rand) {
		now := Base.Add(987654321)
		settled := 0
		for i := range 300 {
			now = now.Add(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
			clock.Set(now)
			cost := 1 + rng.Int64N(3)
			actual := rng.Int64N(cost + 1)
			if rng.IntN(3) == 0 {
				actual = cost
			}
			got, err := store.Decide(ctx, "g", one("with", l), cost)
			if err != nil {
				t.Fatal(err)
			}
			if got.Consumed != 0 {
				if err := got.Settle(ctx, actual); err != nil {
					t.Fatal(err)
				}
				if actual != cost {
					settled++
				}
				if actual > 0 {
					want, err := store.Decide(ctx, "g", one("without", l), actual)
					if err != nil {
						t.Fatal(err)
					}
					if want.Consumed == 0 {
						t.Fatalf("arrival %d: cost %d consumed but its actual %d alone did not: %+v", i, cost, actual, want)
					}
				}
			}
			cost = 1 + rng.Int64N(2)
			now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
			clock.Set(now)
			decideTwins(t, store, l, i, now, cost, "after a settle", "decided at the actual cost")
		}
		if settled < 40 {
			t.Errorf("only %d jobs settled at another cost; the test proves little", settled)
		}
	})

	// A charge (actual > cost) is taken whatever the key holds, never
	// refused; a later job waits for it. Each case decides a job, settles
	// it at once at a larger cost through a Decision rebuilt with Rebind
	// (as an admitter does from a job's charge header), then checks the
	// key's next answers.
	type next struct {
		at         time.Duration
		cost       int64
		want       bucket.Verdict
		retryAfter time.Duration // checked when want is Excess or Rejected
		notBefore  time.Duration // checked when want is Queued
	}
	for _, c := range []struct {
		name         string
		spec         bucket.Spec
		cost, actual int64
		settleAt     time.Duration
		then         []next
	}{
		// Tokens 10 − 12 = −2: a job of 1 waits 3 s.
		{"token_debt", bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 10}, 5, 12, 0,
			[]next{{0, 1, X, 3 * time.Second, 0}, {2999 * time.Millisecond, 1, X, time.Millisecond, 0}, {3 * time.Second, 1, A, 0, 0}}},
		// The debt is at most one burst: tokens −10.
		{"token_debt_capped", bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 10}, 1, 1000, 0,
			[]next{{0, 1, X, 11 * time.Second, 0}, {11 * time.Second, 1, A, 0, 0}}},
		// Refilled to 10 by +20s, then 10 − 11: a job of 1 waits 2 s.
		{"token_later", bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 10}, 5, 16, 20 * time.Second,
			[]next{{20 * time.Second, 1, X, 2 * time.Second, 0}, {22 * time.Second, 1, A, 0, 0}}},
		// Level 1 + 4 = 5 units: the next job is queued behind them (delay 3).
		{"leaky_level", bucket.Spec{Rate: "1/s", Burst: 9, Delay: 3}, 1, 5, 0,
			[]next{{0, 1, Q, 0, 2 * time.Second}}},
		// Level capped at one quota beyond full: 20 units, 11 beyond the burst.
		{"leaky_capped", bucket.Spec{Rate: "1/s", Burst: 9, Delay: 3}, 1, 100, 0,
			[]next{{0, 1, R, 11 * time.Second, 0}, {11 * time.Second, 1, Q, 0, 17 * time.Second}}},
		// The count fills to the limit and no further.
		{"fixed_fills", bucket.Spec{Algorithm: "fixed_window", Limit: 10, Window: "1h"}, 2, 15, time.Minute,
			[]next{{time.Minute, 1, X, 59 * time.Minute, 0}, {time.Hour, 10, A, 0, 0}}},
		// The job's window has passed: nothing is taken from the next one.
		{"fixed_stale", bucket.Spec{Algorithm: "fixed_window", Limit: 10, Window: "1h"}, 2, 9, time.Hour,
			[]next{{time.Hour, 10, A, 0, 0}}},
		// Current count 6; in the next window it weighs 6·(W−el)/W.
		{"sliding_current", bucket.Spec{Algorithm: "sliding_window", Limit: 10, Window: "1h"}, 2, 6, 0,
			[]next{{time.Hour, 5, X, 0, 0}, {time.Hour, 4, A, 0, 0}}},
		// Settled in the next window: the previous count takes it.
		{"sliding_previous", bucket.Spec{Algorithm: "sliding_window", Limit: 10, Window: "1h"}, 2, 8, 90 * time.Minute,
			[]next{{90 * time.Minute, 7, X, 0, 0}, {90 * time.Minute, 6, A, 0, 0}}},
		// The entry grows to 10 (the limit): the next job waits for it to leave.
		{"log_grows", bucket.Spec{Algorithm: "sliding_log", Limit: 10, Window: "1h"}, 2, 30, time.Second,
			[]next{{time.Second, 1, X, time.Hour - time.Second, 0}, {time.Hour, 10, A, 0, 0}}},
		// The entry has left the window: nothing to settle.
		{"log_stale", bucket.Spec{Algorithm: "sliding_log", Limit: 10, Window: "1h"}, 2, 9, time.Hour,
			[]next{{time.Hour, 10, A, 0, 0}}},
	} {
		setup.parallel(t, "settle/charge/"+c.name, func(t *testing.T, store bucket.Store, clock *Clock) {
			l := must(t, c.spec)
			d, err := store.Decide(ctx, "g", one("k", l), c.cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Consumed != 1 {
				t.Fatalf("the job of cost %d: %s, consumed %b; want it taken", c.cost, d.Verdict, d.Consumed)
			}
			clock.Set(Base.Add(c.settleAt))
			if err := bucket.Rebind(store, "g", one("k", l), c.cost, d.At).Settle(ctx, c.actual); err != nil {
				t.Fatal(err)
			}
			for i, n := range c.then {
				clock.Set(Base.Add(n.at))
				got, err := store.Decide(ctx, "g", one("k", l), n.cost)
				if err != nil {
					t.Fatal(err)
				}
				ok := got.Verdict == n.want
				switch n.want {
				case X, R:
					ok = ok && (n.retryAfter == 0 || got.RetryAfter == n.retryAfter)
				case Q:
					ok = ok && got.NotBefore.Equal(Base.Add(n.notBefore))
				}
				if !ok {
					t.Fatalf("after a settle of cost %d at %d, job %d (cost %d at +%v): %s, retry after %v, not before +%v; want %s (retry after %v, not before +%v)",
						c.cost, c.actual, i+1, n.cost, n.at, got.Verdict, got.RetryAfter, got.NotBefore.Sub(Base), n.want, n.retryAfter, n.notBefore)
				}
			}
		})
	}

	// Only the tiers that charged the job are settled: an Excess tier took
	// nothing and gets nothing.
	setup.parallel(t, "settle/only_consumed_tiers", func(t *testing.T, store bucket.Store, _ *Clock) {
		tiers := []bucket.Tier{
			{Key: "0:client", Limit: must(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 10})},
			{Key: "1:global", Limit: must(t, bucket.Spec{Algorithm: "fixed_window", Limit: 1, Window: "1h"})},
		}
		if _, err := store.Decide(ctx, "g", tiers, 1); err != nil {
			t.Fatal(err)
		}
		d, err := store.Decide(ctx, "g", tiers, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Verdict != X || d.Consumed != 0b01 {
			t.Fatalf("second job: %s consumed %02b, want excess, consumed 01", d.Verdict, d.Consumed)
		}
		if err := d.Settle(ctx, 5); err != nil { // tokens 10 − 1 − 5 = 4
			t.Fatal(err)
		}
		got, err := store.Decide(ctx, "g", tiers[:1], 1)
		if err != nil {
			t.Fatal(err)
		}
		if got.Verdict != A || got.Remaining != 3 {
			t.Errorf("the token tier after the settle: %s, %d remaining; want admitted, 3", got.Verdict, got.Remaining)
		}
		got, err = store.Decide(ctx, "g", tiers[1:], 1)
		if err != nil {
			t.Fatal(err)
		}
		if got.Verdict != X {
			t.Errorf("the window tier after the settle: %s; want excess (its one unit is the first job's)", got.Verdict)
		}
	})

	// A settle to 0 gives everything back, as a refund does.
	setup.parallel(t, "settle/zero_is_a_refund", func(t *testing.T, store bucket.Store, _ *Clock) {
		for _, spec := range allSpecs() {
			l := must(t, spec)
			d, err := store.Decide(ctx, "g", one("z", l), 10)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Settle(ctx, 0); err != nil {
				t.Fatal(err)
			}
			got, err := store.Decide(ctx, "g", one("z", l), 10)
			if err != nil {
				t.Fatal(err)
			}
			if got.Consumed != 1 {
				t.Errorf("%s: after settling a job of 10 at 0, a job of 10: %s; want it taken", l, got.Verdict)
			}
		}
	})

	// Bad input is refused with an error that says what.
	setup.parallel(t, "settle/invalid", func(t *testing.T, store bucket.Store, _ *Clock) {
		l := must(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 10})
		d, err := store.Decide(ctx, "g", one("k", l), 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, actual := range []int64{-1, bucket.MaxActualCost + 1} {
			if err := d.Settle(ctx, actual); !errors.Is(err, bucket.ErrInvalidActual) {
				t.Errorf("actual %d: %v, want ErrInvalidActual", actual, err)
			}
		}
		other, err := bucket.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		if err := bucket.Rebind(other, "g", one("k", l), 1, d.At).Settle(ctx, 2); err != nil {
			t.Fatal(err) // another store's own decision settles there
		}
		if err := store.Settle(ctx, bucket.Rebind(other, "g", one("k", l), 1, d.At), 2); !errors.Is(err, bucket.ErrInvalidRefund) {
			t.Errorf("a decision of another store: %v, want ErrInvalidRefund", err)
		}
	})
}
