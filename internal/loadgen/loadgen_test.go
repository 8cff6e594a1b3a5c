package loadgen

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sleeper answers every job after d, Admitted, and keeps what it saw.
type sleeper struct {
	d     time.Duration
	start time.Time

	mu      sync.Mutex
	sentAt  []time.Duration // since start, in order of arrival
	keys    map[string]int
	now, hi int
}

func (s *sleeper) Submit(ctx context.Context, r Request) Outcome {
	s.mu.Lock()
	s.sentAt = append(s.sentAt, time.Since(s.start))
	if s.keys == nil {
		s.keys = map[string]int{}
	}
	s.keys[r.Key]++
	s.now++
	s.hi = max(s.hi, s.now)
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.now--; s.mu.Unlock() }()
	select {
	case <-time.After(s.d):
		return Outcome{Verdict: Admitted}
	case <-ctx.Done():
		return Outcome{Failed, "canceled"}
	}
}

func mustRun(t *testing.T, ctx context.Context, cfg Config) *Report {
	t.Helper()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// An open loop sends job i at exactly i/rate, whatever the answers, and
// measures latency from there.
func TestOpenLoopKeepsItsSchedule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 250 * time.Millisecond, start: time.Now()}
		rep := mustRun(t, t.Context(), Config{Target: s, Rate: bucket.Rate{Count: 3, Per: time.Second}, Count: 10})
		if len(s.sentAt) != 10 || rep.Sent != 10 || rep.Counts.Admitted != 10 {
			t.Fatalf("sent %d (report %d), admitted %d; want 10", len(s.sentAt), rep.Sent, rep.Counts.Admitted)
		}
		for i, at := range s.sentAt {
			// ⌊i·1s/3⌋, in integer nanoseconds.
			if want := time.Duration(int64(i) * int64(time.Second) / 3); at != want {
				t.Errorf("job %d sent at %v, want %v", i, at, want)
			}
		}
		if s.hi != 1 {
			t.Errorf("%d jobs outstanding at once, want 1 (each is answered before the next is due)", s.hi)
		}
		if rep.Latency.Min() != int64(250*time.Millisecond) || rep.Latency.Max() != int64(250*time.Millisecond) {
			t.Errorf("latencies %v to %v, want 250ms", time.Duration(rep.Latency.Min()), time.Duration(rep.Latency.Max()))
		}
		if rep.Late != 0 || rep.Unsent != 0 || rep.MaxSendLag != 0 {
			t.Errorf("late %d unsent %d lag %v, want none", rep.Late, rep.Unsent, rep.MaxSendLag)
		}
		// The last job is due at 3s and answered at 3.25s.
		if rep.Elapsed != 3250*time.Millisecond {
			t.Errorf("elapsed %v, want 3.25s", rep.Elapsed)
		}
	})
}

// Busy-waiting the last stretch before a due time sends no job early (in
// real time: synctest's clock does not move while a goroutine spins).
func TestSpinWaitNeverSendsEarly(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sent []time.Time
	start := time.Now()
	rep := mustRun(t, t.Context(), Config{
		Target: TargetFunc(func(context.Context, Request) Outcome {
			mu.Lock()
			sent = append(sent, time.Now())
			mu.Unlock()
			return Outcome{Verdict: Admitted}
		}),
		Rate: bucket.Rate{Count: 2000, Per: time.Second}, Count: 200, SpinWait: time.Millisecond,
	})
	if rep.Sent != 200 || len(sent) != 200 {
		t.Fatalf("sent %d", len(sent))
	}
	slices.SortFunc(sent, func(a, b time.Time) int { return a.Compare(b) })
	for i, at := range sent {
		// Job i is due ⌊i/2⌋ms after Run's start, which is after start.
		if due := start.Add(time.Duration(i) * time.Second / 2000); at.Before(due) {
			t.Fatalf("job %d sent %v before it was due", i, due.Sub(at))
		}
	}
}

// A server slower than the schedule, with one job outstanding at most:
// jobs wait for the slot, are counted late, and are charged the wait —
// their latency is measured from when they were due, not from when they
// could be sent (no coordinated omission). Jobs still waiting when the run
// ends are counted unsent.
func TestOpenLoopChargesTheWaitForASlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 60 * time.Millisecond, start: time.Now()}
		rep := mustRun(t, t.Context(), Config{
			Target: s, Rate: bucket.Rate{Count: 100, Per: time.Second}, MaxOutstanding: 1, Duration: time.Second,
		})
		// Job i is due at 10i ms, sent at 60i ms (when job i−1 is answered),
		// answered at 60(i+1) ms: sent while 60i < 1000, so jobs 0 to 16.
		if rep.Sent != 17 || rep.Late != 16 || rep.Unsent != 100-17 {
			t.Fatalf("sent %d late %d unsent %d, want 17 16 83", rep.Sent, rep.Late, rep.Unsent)
		}
		for i, at := range s.sentAt {
			if want := time.Duration(i) * 60 * time.Millisecond; at != want {
				t.Errorf("job %d sent at %v, want %v", i, at, want)
			}
		}
		// Latency of job i: 60(i+1) − 10i = 60 + 50i ms. A closed-loop view
		// would have said 60ms for every job.
		if got, want := time.Duration(rep.Latency.Max()), 860*time.Millisecond; got != want {
			t.Errorf("max latency %v, want %v", got, want)
		}
		if got := time.Duration(rep.Latency.Quantile(0.5)); got < 455*time.Millisecond || got > 465*time.Millisecond {
			t.Errorf("median latency %v, want 460ms ± 0.4%%", got)
		}
		if rep.MaxSendLag != 800*time.Millisecond {
			t.Errorf("max send lag %v, want 800ms (job 16: due 160ms, sent 960ms)", rep.MaxSendLag)
		}
		if rep.MaxOutstanding != 1 || s.hi != 1 {
			t.Errorf("outstanding %d (target saw %d), want at most 1", rep.MaxOutstanding, s.hi)
		}
	})
}

// A closed loop never has more jobs outstanding than callers, keeps all of
// them busy, and measures from the send.
func TestClosedLoopBoundsConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 10 * time.Millisecond, start: time.Now()}
		rep := mustRun(t, t.Context(), Config{
			Target: s, Callers: 4, Warmup: 100 * time.Millisecond, Duration: time.Second,
			Keys: []string{"a", "b", "c"},
		})
		if s.hi != 4 || rep.MaxOutstanding != 4 {
			t.Fatalf("%d jobs outstanding at once (report %d), want 4", s.hi, rep.MaxOutstanding)
		}
		// 10ms each: 10 rounds of 4 in the warm-up, 100 rounds measured.
		if rep.Warmup != 40 || rep.Sent != 400 || rep.Counts.Admitted != 400 {
			t.Fatalf("warm-up %d, sent %d, admitted %d; want 40 400 400", rep.Warmup, rep.Sent, rep.Counts.Admitted)
		}
		if rep.Latency.Min() != int64(10*time.Millisecond) || rep.Latency.Max() != int64(10*time.Millisecond) {
			t.Errorf("latencies %v to %v, want 10ms", time.Duration(rep.Latency.Min()), time.Duration(rep.Latency.Max()))
		}
		if rep.Elapsed != time.Second || rep.Throughput != 400 {
			t.Errorf("elapsed %v throughput %v, want 1s and 400/s", rep.Elapsed, rep.Throughput)
		}
		if s.keys["a"] != 147 || s.keys["b"] != 147 || s.keys["c"] != 146 {
			t.Errorf("keys used %v, want round-robin over 440 jobs", s.keys)
		}
	})
}

// With a count, exactly that many measured jobs are sent, in either loop.
func TestCountEndsTheRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, cfg := range []Config{
			{Callers: 7, Count: 1000},
			{Rate: bucket.Rate{Count: 1000, Per: time.Second}, Count: 1000},
			{Rate: bucket.Rate{Count: 1000, Per: time.Second}, Count: 1000, Duration: time.Hour},
		} {
			var n atomic.Int64
			cfg.Target = TargetFunc(func(context.Context, Request) Outcome {
				n.Add(1)
				time.Sleep(time.Millisecond)
				return Outcome{Verdict: Queued}
			})
			rep := mustRun(t, t.Context(), cfg)
			if n.Load() != 1000 || rep.Sent != 1000 || rep.Counts.Queued != 1000 || rep.Latency.Count() != 1000 {
				t.Errorf("%+v: target saw %d, sent %d, queued %d, latencies %d; want 1000", cfg, n.Load(), rep.Sent, rep.Counts.Queued, rep.Latency.Count())
			}
		}
	})
}

// Ending the context ends the run at once; jobs then abandoned are not
// counted as errors.
func TestInterruptedRunReports(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, cfg := range []Config{{Callers: 3}, {Rate: bucket.Rate{Count: 50, Per: time.Second}}} {
			ctx, cancel := context.WithTimeout(t.Context(), 1050*time.Millisecond)
			cfg.Target = &sleeper{d: 100 * time.Millisecond, start: time.Now()}
			cfg.Duration = time.Hour
			start := time.Now()
			rep := mustRun(t, ctx, cfg)
			cancel()
			if time.Since(start) != 1050*time.Millisecond {
				t.Errorf("%+v: returned after %v, want 1.05s", cfg, time.Since(start))
			}
			if !rep.Interrupted || rep.Canceled == 0 || rep.Counts.Errors != 0 || rep.Counts.Admitted == 0 {
				t.Errorf("%+v: interrupted %v canceled %d errors %d admitted %d", cfg, rep.Interrupted, rep.Canceled, rep.Counts.Errors, rep.Counts.Admitted)
			}
		}
	})
}

func TestProgressEverySecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var got []Progress
		rep := mustRun(t, t.Context(), Config{
			Target: &sleeper{d: time.Millisecond}, Rate: bucket.Rate{Count: 100, Per: time.Second},
			Warmup: 1500 * time.Millisecond, Duration: 3 * time.Second, Progress: func(p Progress) { got = append(got, p) },
		})
		if len(got) != 4 {
			t.Fatalf("%d progress reports in 4.5s, want 4", len(got))
		}
		if !got[0].Warmup || got[1].Warmup || got[3].Elapsed != 4*time.Second || got[3].Rate != 100 {
			t.Errorf("progress %+v", got)
		}
		// Measured: jobs due from 1.5s, answered 1ms later.
		if got[3].Counts.Admitted != 250 || rep.Counts.Admitted != 300 {
			t.Errorf("admitted %d at 4s, %d in the end; want 250 and 300", got[3].Counts.Admitted, rep.Counts.Admitted)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	target := TargetFunc(func(context.Context, Request) Outcome { return Outcome{} })
	rate := bucket.Rate{Count: 1, Per: time.Second}
	for _, c := range []Config{
		{Callers: 1, Count: 1},
		{Target: target, Count: 1},
		{Target: target, Callers: 1, Rate: rate, Count: 1},
		{Target: target, Callers: -1, Count: 1},
		{Target: target, Callers: 1},
		{Target: target, Rate: rate, Count: 1, MaxOutstanding: -1},
		{Target: target, Rate: bucket.Rate{Count: 1}, Count: 1},
		{Target: target, Callers: 1, Count: 1, Warmup: -1},
		{Target: target, Rate: rate, Count: 1, SpinWait: -1},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", c, err)
		}
	}
}
