package buckettest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// exerciseRefund checks Decision.Refund and Store.Refund: the contract's "a rejected job consumes
// from no tier — also when the backlog refuses a job that the tiers would
// have queued (its units are given back)".
func exerciseRefund(t *testing.T, setup setupFunc) {
	ctx := context.Background()

	// A job decided and refunded leaves no trace: key "with" gets extra
	// jobs, each given back now or later, before the next arrival; key
	// "without" never sees them. Every arrival then gets the same answer on
	// both keys, to the nanosecond.
	setup.eachLimit(t, "refund/restores", 99, []bucket.Spec{
		{Rate: "1/s", Burst: 9, Delay: 3},
		{Algorithm: "token_bucket", Rate: "1/s", Burst: 10},
		{Algorithm: "fixed_window", Limit: 10, Window: "2s"},
		{Algorithm: "sliding_log", Limit: 10, Window: "2s"},
		{Algorithm: "sliding_window", Limit: 10, Window: "2s"},
		{Rate: "7/3s", Burst: 4, Delay: 1},
		{Rate: "10/s", Burst: 3, NoDelay: true},
		{Algorithm: "token_bucket", Rate: "3/s", Burst: 5},
		{Algorithm: "fixed_window", Limit: 5, Window: "1500ms"},
		{Algorithm: "sliding_window", Limit: 7, Window: "700ms"},
		{Algorithm: "sliding_log", Limit: 4, Window: "333ms"},
	}, func(t *testing.T, store bucket.Store, clock *Clock, l bucket.Limit, rng *rand.Rand) {
		now := Base.Add(123456789)
		refunded := 0
		for i := range 300 {
			gap := time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
			if rng.IntN(10) == 0 {
				gap += time.Duration(rng.Int64N(int64(5 * time.Second)))
			}
			next := now.Add(gap)
			if rng.IntN(3) == 0 {
				// An extra job at some time in the gap, given back at a
				// later time in it (often at once).
				at := now.Add(time.Duration(rng.Int64N(int64(gap) + 1)))
				clock.Set(at)
				cost := 1 + rng.Int64N(3)
				d, err := store.Decide(ctx, "g", one("with", l), cost)
				if err != nil {
					t.Fatal(err)
				}
				back := at
				if rng.IntN(2) == 0 {
					back = at.Add(time.Duration(rng.Int64N(int64(next.Sub(at)) + 1)))
				}
				clock.Set(back)
				if err := d.Refund(ctx); err != nil {
					t.Fatal(err)
				}
				if d.Consumed != 0 {
					refunded++
				}
			}
			now = next
			clock.Set(now)
			cost := 1 + rng.Int64N(3)
			if rng.IntN(3) != 0 {
				cost = 1
			}
			decideTwins(t, store, l, i, now, cost, "after refunds", "never decided")
		}
		t.Logf("%d extra jobs consumed and were given back", refunded)
		if refunded < 15 {
			t.Errorf("only %d extra jobs consumed and were refunded; the test proves little", refunded)
		}
	})

	// An Excess decision over several tiers consumed from the tiers that
	// admitted it; the refund gives back exactly those.
	setup.parallel(t, "refund/multi_tier_excess", func(t *testing.T, store bucket.Store, _ *Clock) {
		tiers := []bucket.Tier{
			{Key: "0:client", Limit: must(t, bucket.Spec{Rate: "1/s", Burst: 5, NoDelay: true})},
			{Key: "1:global", Limit: must(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 1})},
			{Key: "2:window", Limit: must(t, bucket.Spec{Algorithm: "fixed_window", Limit: 5, Window: "1h"})},
			{Key: "3:log", Limit: must(t, bucket.Spec{Algorithm: "sliding_log", Limit: 5, Window: "1h"})},
		}
		d1, err := store.Decide(ctx, "g", tiers, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d1.Verdict != A || d1.Consumed != 0b1111 {
			t.Fatalf("first job: %s consumed %04b, want admitted by all four tiers", d1.Verdict, d1.Consumed)
		}
		d2, err := store.Decide(ctx, "g", tiers, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d2.Verdict != X || d2.Tier != 1 || d2.Consumed != 0b1101 {
			t.Fatalf("second job: %s by tier %d consumed %04b, want excess by tier 1, consumed 1101", d2.Verdict, d2.Tier, d2.Consumed)
		}
		// The backlog is full: give the second job's units back.
		if err := d2.Refund(ctx); err != nil {
			t.Fatal(err)
		}
		// Every tier holds the first job only: each decides a lone job as
		// its second.
		for i, want := range []struct {
			v         bucket.Verdict
			remaining int64
		}{{A, 4}, {X, 0}, {A, 3}, {A, 3}} {
			d, err := store.Decide(ctx, "g", tiers[i:i+1], 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != want.v || d.Remaining != want.remaining {
				t.Errorf("tier %d (%s) after the refund: %s, %d remaining; want %s, %d",
					i, tiers[i].Limit, d.Verdict, d.Remaining, want.v, want.remaining)
			}
		}
	})

	// A leaky bucket's Queued verdict consumed its excess; the refund takes
	// the excess back and the next job is queued where the refunded one was.
	setup.parallel(t, "refund/leaky_queued", func(t *testing.T, store bucket.Store, clock *Clock) {
		l := must(t, bucket.Spec{Rate: "1/s", Burst: 5, Delay: 1})
		for k := 1; k <= 3; k++ {
			if _, err := store.Decide(ctx, "g", one("k", l), 1); err != nil {
				t.Fatal(err)
			}
		}
		// Excess 2 now: the third job waits until +1s. At +400ms a job of
		// cost 2 leaves e' = max(0, 1.6 + 1) + 1 = 3.6: queued until
		// +0.4s + (3.6 − 1)/r = +3s.
		clock.Set(Base.Add(400 * time.Millisecond))
		d, err := store.Decide(ctx, "g", one("k", l), 2)
		if err != nil {
			t.Fatal(err)
		}
		if d.Verdict != Q || d.Consumed != 1 || !d.NotBefore.Equal(Base.Add(3*time.Second)) {
			t.Fatalf("cost 2 at +400ms: %s consumed %b not before +%v, want queued until +3s", d.Verdict, d.Consumed, d.NotBefore.Sub(Base))
		}
		clock.Set(Base.Add(500 * time.Millisecond))
		if err := store.Refund(ctx, d); err != nil { // as d.Refund does
			t.Fatal(err)
		}
		d, err = store.Decide(ctx, "g", one("k", l), 2)
		if err != nil {
			t.Fatal(err)
		}
		// As if the refunded job had never come: e = 2 − 0.5 = 1.5, e' =
		// 1.5 + 1 + 1 = 3.5, not before +0.5s + 2.5s. (Without the refund
		// e' would be 5.5: rejected.)
		if d.Verdict != Q || !d.NotBefore.Equal(Base.Add(3*time.Second)) || d.Remaining != 1 {
			t.Fatalf("cost 2 at +500ms after the refund: %s not before +%v, %d remaining; want queued until +3s, 1 remaining",
				d.Verdict, d.NotBefore.Sub(Base), d.Remaining)
		}
	})

	// A window refund gives back only while the job's units still count:
	// once its window has passed, the refund must not take from the units
	// of jobs that came later. Key "refunded" and key "kept" see the same
	// jobs; only "refunded" gets the late refund; both must answer alike.
	t.Run("refund/stale_window_is_a_noop", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			spec  bucket.Spec
			stale time.Duration // the refund's time: the job's units count no more
		}{
			{bucket.Spec{Algorithm: "fixed_window", Limit: 3, Window: "10s"}, 10 * time.Second},
			{bucket.Spec{Algorithm: "fixed_window", Limit: 3, Window: "10s"}, 35 * time.Second},
			{bucket.Spec{Algorithm: "sliding_window", Limit: 3, Window: "10s"}, 20 * time.Second},
			{bucket.Spec{Algorithm: "sliding_window", Limit: 3, Window: "10s"}, 29 * time.Second},
			{bucket.Spec{Algorithm: "sliding_log", Limit: 3, Window: "10s"}, 19 * time.Second},
			{bucket.Spec{Algorithm: "sliding_log", Limit: 3, Window: "10s"}, 25 * time.Second},
		} {
			l := must(t, c.spec)
			t.Run(fmt.Sprintf("%s/at_%v", l, c.stale), func(t *testing.T) {
				store, clock := setup(t)
				// decideBoth returns key "refunded"'s decision.
				decideBoth := func(cost int64) (refunded bucket.Decision) {
					t.Helper()
					for _, key := range []string{"refunded", "kept"} {
						got, err := store.Decide(ctx, "g", one(key, l), cost)
						if err != nil {
							t.Fatal(err)
						}
						if key == "kept" && !equal(got, refunded) {
							t.Fatalf("+%v cost %d: after a stale refund %+v\nwithout it %+v", clock.Now().Sub(Base), cost, refunded, got)
						}
						if key == "refunded" {
							refunded = got
						}
					}
					return refunded
				}
				clock.Set(Base.Add(9 * time.Second))
				job := decideBoth(2)
				if job.Consumed != 1 {
					t.Fatalf("the job to refund was not admitted: %+v", job)
				}
				clock.Set(Base.Add(c.stale))
				decideBoth(2) // a later job, in a later window
				if err := job.Refund(ctx); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					decideBoth(1)
				}
			})
		}
	})

	// Refunds never make a bucket roomier than empty: a refund after the
	// units have drained, a second refund of one decision, a refund for a
	// key the store does not know. A burst afterwards gets exactly the
	// quota.
	t.Run("refund/never_below_empty", func(t *testing.T) {
		t.Parallel()
		for _, spec := range allSpecs() {
			l := must(t, spec)
			store, clock := setup(t)
			d, err := store.Decide(ctx, "g", one("k", l), 3)
			if err != nil {
				t.Fatal(err)
			}
			if d.Consumed != 1 {
				t.Fatalf("%s: cost 3 on a new key: %+v, want consumed", l, d)
			}
			// Most of the leaky bucket's 3 units have drained, most of the
			// token bucket's refilled.
			clock.Set(Base.Add(2500 * time.Millisecond))
			// The ghost's refund is k's decision bound to a key the store
			// never saw.
			ghost := d
			ghost.Bind(store, "g", one("ghost", l), 3)
			for _, d := range []bucket.Decision{d, d, ghost} {
				if err := d.Refund(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, key := range []string{"k", "ghost"} {
				accepted := int64(0)
				for range 40 {
					d, err := store.Decide(ctx, "g", one(key, l), 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Verdict <= Q {
						accepted++
					}
				}
				if accepted != l.Quota() {
					t.Errorf("%s, key %s: after refunds, %d of 40 jobs accepted at one instant, want the quota %d", l, key, accepted, l.Quota())
				}
			}
		}
	})

	// A rejected decision consumed nothing (Consumed 0), and refunding it
	// gives nothing back.
	setup.parallel(t, "refund/rejected_consumed_nothing", func(t *testing.T, store bucket.Store, _ *Clock) {
		tiers := []bucket.Tier{
			{Key: "0:tokens", Limit: must(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 5})},
			{Key: "1:leaky", Limit: must(t, bucket.Spec{Rate: "1/s"})},
			{Key: "2:window", Limit: must(t, bucket.Spec{Algorithm: "fixed_window", Limit: 5, Window: "1h"})},
		}
		for k, want := range []struct {
			v        bucket.Verdict
			consumed uint8
		}{{A, 0b111}, {R, 0}, {R, 0}} {
			d, err := store.Decide(ctx, "g", tiers, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != want.v || d.Consumed != want.consumed {
				t.Fatalf("job %d: %s consumed %03b, want %s consumed %03b", k+1, d.Verdict, d.Consumed, want.v, want.consumed)
			}
			if d.Verdict == R {
				if err := d.Refund(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Every tier holds the admitted job, nothing more, nothing less.
		for i, want := range []struct {
			v         bucket.Verdict
			remaining int64
		}{{A, 3}, {R, 0}, {A, 3}} {
			d, err := store.Decide(ctx, "g", tiers[i:i+1], 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != want.v || d.Remaining != want.remaining {
				t.Errorf("tier %d (%s): %s, %d remaining; want %s, %d", i, tiers[i].Limit, d.Verdict, d.Remaining, want.v, want.remaining)
			}
		}
	})

	// Concurrent decisions and refunds at one instant: every consumed job is
	// given back, so the key ends empty and a burst gets exactly the quota.
	t.Run("refund/concurrent", func(t *testing.T) {
		t.Parallel()
		for _, spec := range allSpecs() {
			store, _ := setup(t) // the clock stands still
			l := must(t, spec)
			concurrently(t, 16, func(g int) error {
				for i := range 30 {
					cost := int64(1 + (g+i)%3)
					d, err := store.Decide(ctx, "g", one("hot", l), cost)
					if err == nil {
						err = d.Refund(ctx)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			accepted := int64(0)
			for range 40 {
				d, err := store.Decide(ctx, "g", one("hot", l), 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Verdict <= Q {
					accepted++
				}
			}
			if accepted != l.Quota() {
				t.Errorf("%s: after 480 jobs each given back, %d of 40 accepted, want the quota %d", l, accepted, l.Quota())
			}
		}
	})

	setup.parallel(t, "refund/bad_requests", func(t *testing.T, store bucket.Store, _ *Clock) {
		ok := must(t, bucket.Spec{Rate: "1/s"})
		tiers := []bucket.Tier{{Key: "a", Limit: ok}, {Key: "b", Limit: ok}}
		bound := func(tiers []bucket.Tier, cost int64) bucket.Decision {
			d := bucket.Decision{Verdict: A, At: Base, NotBefore: Base, Consumed: 0b11}
			d.Bind(store, "g", tiers, cost)
			return d
		}
		other, _ := setup(t)
		foreign, err := other.Decide(ctx, "g", tiers, 1)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			d    bucket.Decision
			want error
		}{
			{"zero cost", bound(tiers, 0), bucket.ErrInvalidCost},
			{"no tiers", bound(nil, 1), bucket.ErrTooManyTiers},
			{"zero limit", bound([]bucket.Tier{{Key: "a"}}, 1), bucket.ErrInvalidLimit},
			{"duplicate keys", bound([]bucket.Tier{{Key: "a", Limit: ok}, {Key: "a", Limit: ok}}, 1), bucket.ErrDuplicateKey},
			{"consumed beyond the tiers", bound(tiers[:1], 1), bucket.ErrInvalidRefund},
			{"another store's decision", foreign, bucket.ErrInvalidRefund},
			{"no store's decision", bucket.Decision{Verdict: A, At: Base, NotBefore: Base, Consumed: 1}, bucket.ErrInvalidRefund},
		}
		for _, c := range cases {
			if err := store.Refund(ctx, c.d); !errors.Is(err, c.want) {
				t.Errorf("%s: store.Refund: error %v, want %v", c.name, err, c.want)
			}
		}
		// Decision.Refund goes to the store that decided: the other
		// store's decision is that store's to refund.
		if err := foreign.Refund(ctx); err != nil {
			t.Errorf("the other store's decision, refunded through itself: %v", err)
		}
		// A Decision no store made that consumed nothing needs no refund.
		if err := (bucket.Decision{Verdict: R}).Refund(ctx); err != nil {
			t.Errorf("a zero Decision's Refund: %v", err)
		}
	})
}
