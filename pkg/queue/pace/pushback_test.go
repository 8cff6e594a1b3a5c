package pace_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

var per100 = bucket.Rate{Count: 100, Per: time.Second}

// yieldingPacers returns n YieldingPacers of one queue over KVPacers, each
// on a connection of its own (as n worker processes would be).
func yieldingPacers(t *testing.T, srv *queuetest.Server, n int, maxRate bucket.Rate, adaptive bool) []*pace.YieldingPacer {
	t.Helper()
	var ps []*pace.YieldingPacer
	for range n {
		kv, err := pace.OpenPacerBucket(t.Context(), srv.JetStream(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pace.NewKVPacer(kv, "hooks", maxRate)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pace.NewYieldingPacer(kp, kv, "hooks", maxRate, adaptive)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// A pushback told to one worker's pacer pauses the other's: its next
// booking starts no sooner than the pause's end, read from the shared
// entry; a pushback while paused extends the pause without beginning
// another.
func TestPushbackPausesEveryWorker(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	ps := yieldingPacers(t, srv, 2, per100, false)
	ctx := t.Context()
	// Pauses long enough that the reads and the second pushback below come
	// within the first even on a loaded machine.
	if err := ps[0].Yield(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	kv, err := pace.OpenPacerBucket(ctx, srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pace.ReadLeakState(ctx, kv, "hooks")
	if err != nil {
		t.Fatal(err)
	}
	if until := time.Until(st.PausedUntil); until <= 0 || until > 3*time.Second {
		t.Fatalf("shared pause ends in %v, want within 3s from now: %+v", until, st)
	}
	if err := ps[1].Yield(ctx, 2*time.Second); err != nil { // within the pause: no new one
		t.Fatal(err)
	}
	wait, err := ps[1].Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if start := time.Now().Add(wait); start.Before(st.PausedUntil) {
		t.Errorf("the other worker booked a start at %v, %v before the pause ends", start, st.PausedUntil.Sub(start))
	}
	if got := ps[0].Pauses() + ps[1].Pauses(); got != 1 {
		t.Errorf("pauses begun = %d, want 1 (the second pushback came while paused)", got)
	}
	if !st.CutAt.IsZero() {
		t.Errorf("a leak that is not adaptive was cut: %+v", st)
	}
	if r, _ := ps[1].Current(); r != 100_000 {
		t.Errorf("current rate %d/1000 s, want the maximum 100/s", r)
	}
}

// An adaptive leak is cut to 7/10 of its rate by a pushback, shared by
// every worker; pushbacks that answer starts made before the pause do not
// cut it again; one after the pause cuts from the rate it climbed to. The
// other worker's bookings follow the cut rate.
func TestAdaptiveLeakCutsAndShares(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	ps := yieldingPacers(t, srv, 2, per100, true)
	ctx := t.Context()
	clock := &frozen{now: time.Now().Add(-time.Hour)} // pauses of the past: Reserve need not wait
	pace.SetYieldingPacerClock(ps[0], clock.Now)

	if err := ps[0].Yield(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	kv, err := pace.OpenPacerBucket(ctx, srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pace.ReadLeakState(ctx, kv, "hooks")
	if err != nil {
		t.Fatal(err)
	}
	if st.From != 100_000 || st.To != 70_000 || !st.CutAt.Equal(clock.Now()) {
		t.Fatalf("after a pushback at 100/s: %+v, want cut from 100/s to 70/s now", st)
	}
	clock.Add(900 * time.Millisecond) // still paused: the same overload
	if err := ps[0].Yield(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if again, _ := pace.ReadLeakState(ctx, kv, "hooks"); again.From != st.From || !again.CutAt.Equal(st.CutAt) {
		t.Fatalf("a pushback during the pause cut again: %+v", again)
	}
	clock.Add(1400 * time.Millisecond) // 2.3 s after the cut, 400 ms after the pause
	want := st.Rate(clock.Now(), per100, true)
	if err := ps[0].Yield(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ = pace.ReadLeakState(ctx, kv, "hooks")
	if st.From != want || st.To != want*7/10 {
		t.Fatalf("second cut: %+v, want from %d to %d", st, want, want*7/10)
	}

	// The other worker (real clock: an hour after the cut, so climbed
	// back) books at the maximum; at the cut's time it would book at To.
	if r := st.Rate(st.CutAt, per100, true); r != st.To {
		t.Errorf("rate at the cut = %d, want %d", r, st.To)
	}
	if _, err := ps[1].Reserve(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := ps[1].Current(); r != 100_000 {
		t.Errorf("an hour after the cut the rate is %d/1000 s, want the maximum", r)
	}
}

// The adaptive rate as a function of the time since the cut: it climbs
// fast from the cut rate, flattens at the rate the pushback came at, then
// probes above it slowly up to the maximum; never below the floor.
func TestAdaptiveLeakRateOverTime(t *testing.T) {
	t.Parallel()
	cut := time.Unix(1_700_000_000, 0)
	st := pace.LeakState{CutAt: cut, From: 30_000, To: 21_000}
	for _, tc := range []struct {
		after time.Duration
		want  int64
	}{
		{0, 21_000},
		{time.Second, 30_000 - 9_000*81/100},     // 1 − τ/C = 0.9
		{5 * time.Second, 30_000 - 9_000/4},      // halfway: 3/4 of the way back
		{9 * time.Second, 30_000 - 9_000/100},    // nearly there
		{pace.LeakClimb, 30_000},                 // back at the pushback's rate
		{pace.LeakClimb + 3*time.Second, 30_700}, // probing: 70,000·(3/30)²
		{pace.LeakClimb + 15*time.Second, 47_500},
		{pace.LeakClimb + pace.LeakProbe, 100_000},
		{time.Hour, 100_000},
		{-time.Second, 21_000}, // a clock behind the cut's
	} {
		if got := st.Rate(cut.Add(tc.after), per100, true); got != tc.want {
			t.Errorf("%v after the cut: rate %d, want %d", tc.after, got, tc.want)
		}
	}
	if got := st.Rate(cut, per100, false); got != 100_000 {
		t.Errorf("not adaptive: %d, want the maximum", got)
	}
	low := pace.LeakState{CutAt: cut, From: 1_200, To: 10}
	if got := low.Rate(cut, per100, true); got != 1_000 {
		t.Errorf("below the floor: %d, want 1/s", got)
	}
	if got := pace.LeakFloor(bucket.Rate{Count: 500, Per: time.Second}); got != 5_000 {
		t.Errorf("floor of 500/s = %d, want 5/s", got)
	}
	if got := (pace.LeakState{}).Rate(cut, bucket.Rate{Count: 600, Per: time.Minute}, true); got != 10_000 {
		t.Errorf("never cut, 600/m: %d, want 10/s", got)
	}
}

// Whatever the stored state (another version may have written it) and
// the time, the adaptive rate stays between the floor and the maximum.
func TestAdaptiveLeakRateBounds(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	cut := time.Unix(1_700_000_000, 0)
	for range 10_000 {
		maxRate := bucket.Rate{Count: 1 + rnd.Int64N(100_000), Per: []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour}[rnd.IntN(4)]}
		st := pace.LeakState{CutAt: cut, From: rnd.Int64N(1 << 40), To: rnd.Int64N(1 << 40)}
		at := cut.Add(time.Duration(rnd.Int64N(int64(time.Minute))) - time.Second)
		r := st.Rate(at, maxRate, true)
		if r < pace.LeakFloor(maxRate) || r > pace.MilliRate(maxRate) {
			t.Fatalf("%+v at %v, max %v: rate %d outside [%d, %d]", st, at.Sub(cut), maxRate, r, pace.LeakFloor(maxRate), pace.MilliRate(maxRate))
		}
	}
}
