package pace_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// frozen is a clock that moves only when told to, shared by pacers that
// stand for several machines with one clock.
type frozen struct {
	mu  sync.Mutex
	now time.Time
}

func (c *frozen) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *frozen) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// kvPacers returns n KVPacers of one queue, each on a connection of its
// own (as n worker processes would be), on clock.
func kvPacers(t *testing.T, srv *queuetest.Server, n int, rate bucket.Rate, clock *frozen) []*pace.KVPacer {
	t.Helper()
	var ps []*pace.KVPacer
	for range n {
		kv, err := pace.OpenPacerBucket(t.Context(), srv.JetStream(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pace.NewKVPacer(kv, "email", rate)
		if err != nil {
			t.Fatal(err)
		}
		if clock != nil {
			pace.SetKVPacerClock(p, clock.Now)
		}
		ps = append(ps, p)
	}
	return ps
}

// Concurrent bookings from several connections get distinct starts exactly
// 1/r apart (integer nanoseconds from the chain's anchor, no drift), the
// first after a pause starts at once, and a new rate applies from the next
// booking.
func TestKVPacerSpacesStartsExactly(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	clock := &frozen{now: time.Unix(1_700_000_000, 0)}
	ps := kvPacers(t, srv, 3, bucket.Rate{Count: 3, Per: time.Second}, clock) // 333,333,333.3 ns apart
	ctx := t.Context()

	// 3 connections × 2 goroutines × 10 bookings at one instant: 60
	// distinct slots, slot k at ⌈k/3 s⌉.
	var (
		mu    sync.Mutex
		waits []time.Duration
		wg    sync.WaitGroup
	)
	for _, p := range ps {
		for range 2 {
			wg.Go(func() {
				for range 10 {
					d, err := p.Reserve(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					waits = append(waits, d)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	slices.Sort(waits)
	for k, w := range waits {
		if want := time.Duration((int64(k)*int64(time.Second) + 2) / 3); w != want {
			t.Fatalf("sorted booking %d starts after %v, want exactly %v", k, w, want)
		}
	}
	var conflicts uint64
	for _, p := range ps {
		conflicts += p.Stats().Conflicts
	}
	t.Logf("60 bookings from 3 connections: %d write conflicts retried", conflicts)

	// 100ms later the chain is still busy: slot 60 is at 20 s.
	clock.Add(100 * time.Millisecond)
	if d, _ := ps[1].Reserve(ctx); d != 20*time.Second-100*time.Millisecond {
		t.Errorf("booking while the chain is busy starts after %v, want 19.9s", d)
	}
	// After a pause: at once.
	clock.Add(time.Minute)
	if d, _ := ps[2].Reserve(ctx); d != 0 {
		t.Errorf("first booking after a pause starts after %v, want 0", d)
	}
	// A new rate applies from the next booking, 1/r_new after the last.
	if err := ps[0].SetRate(bucket.Rate{Count: 20, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		if d, _ := ps[0].Reserve(ctx); d != want {
			t.Errorf("booking %d at 20/s starts after %v, want %v", i, d, want)
		}
	}
	if err := ps[0].SetRate(bucket.Rate{}); err == nil {
		t.Error("SetRate accepted a zero rate")
	}
	if _, err := pace.NewKVPacer(nil, "email", bucket.Rate{Count: 1, Per: time.Second}); err == nil {
		t.Error("NewKVPacer accepted a nil bucket")
	}
}

// With real clocks, bookings made at once from three connections start
// ≥ 1/r apart: the write conflicts are retried, never double-booked.
func TestKVPacerRealClockDistinctStarts(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	const rate = 50
	ps := kvPacers(t, srv, 3, bucket.Rate{Count: rate, Per: time.Second}, nil)
	var (
		mu     sync.Mutex
		starts []time.Time
		wg     sync.WaitGroup
	)
	for _, p := range ps {
		wg.Go(func() {
			for range 20 {
				d, err := p.Reserve(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				// The booking's start in this clock: what Reserve returned
				// the wait from (now is read after, so this errs late).
				at := time.Now().Add(d)
				mu.Lock()
				starts = append(starts, at)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(starts, time.Time.Compare)
	span := starts[len(starts)-1].Sub(starts[0])
	// 60 starts at 50/s take 59/50 s = 1.18 s of chain.
	if want := 59 * time.Second / rate; span < want-50*time.Millisecond {
		t.Errorf("60 starts span %v, want ≥ %v (1/r apart)", span, want)
	}
}

// Three workers draining at the leak rate as drainers do — book, wait for
// the start, book again — keep the chain unbroken and rarely conflict: the
// figure the benchmark's flat-out contention overstates.
func TestKVPacerConflictsAtLeakRate(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s of pacing; -short skips it")
	}
	t.Parallel()
	srv := queuetest.Start(t)
	const rate = 50
	ps := kvPacers(t, srv, 3, bucket.Rate{Count: rate, Per: time.Second}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		starts []time.Time
		wg     sync.WaitGroup
	)
	for _, p := range ps {
		wg.Go(func() {
			for ctx.Err() == nil {
				d, err := p.Reserve(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				starts = append(starts, time.Now().Add(d))
				mu.Unlock()
				_ = sleepCtx(ctx, d)
			}
		})
	}
	wg.Wait()
	var st pace.KVPacerStats
	for _, p := range ps {
		s := p.Stats()
		st.Bookings += s.Bookings
		st.Conflicts += s.Conflicts
	}
	slices.SortFunc(starts, time.Time.Compare)
	got := float64(len(starts)-1) / starts[len(starts)-1].Sub(starts[0]).Seconds()
	t.Logf("3 workers at %d/s for 3 s: %d bookings, %d conflicts (%.3f per booking), starts at %.2f/s", rate, st.Bookings, st.Conflicts, float64(st.Conflicts)/float64(st.Bookings), got)
	if got > rate*1.05 {
		t.Errorf("starts at %.2f/s, above the rate %d/s", got, rate)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A FailoverPacer books in Redis, falls back to JetStream when Redis is
// down — and so does another worker's pacer that can still reach Redis, so
// that two chains never run side by side — and goes back to Redis after
// the outage, continuing after the JetStream chain's last start.
func TestFailoverPacer(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	rate := bucket.Rate{Count: 100, Per: time.Second}
	mk := func(redisURL string) *pace.FailoverPacer {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Fatal(err)
		}
		opts.MaxRetries = -1
		opts.DialTimeout = 100 * time.Millisecond
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		st, err := redisbucket.New(c, redisbucket.WithTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		sp, err := pace.NewPacer(st, "email", rate)
		if err != nil {
			t.Fatal(err)
		}
		kvp := kvPacers(t, srv, 1, rate, nil)[0]
		fp, err := pace.NewFailoverPacer(sp, kvp)
		if err != nil {
			t.Fatal(err)
		}
		fp.DownFor = 500 * time.Millisecond
		return fp
	}
	healthy := mk(rds.URL())
	cutOff := mk("redis://127.0.0.1:1/0") // a worker that cannot reach Redis
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reserve := func(p *pace.FailoverPacer) time.Time {
		t.Helper()
		d, err := p.Reserve(ctx)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return time.Now().Add(d)
	}
	reserve(healthy)
	if healthy.OnFallback() {
		t.Fatal("a pacer that reaches Redis fell back")
	}
	reserve(cutOff)
	if !cutOff.OnFallback() {
		t.Fatal("a pacer that cannot reach Redis did not fall back to JetStream")
	}
	// The cut-off worker marked the shared entry: the healthy one follows
	// within its check interval, so one chain paces both.
	deadline := time.Now().Add(5 * time.Second)
	for !healthy.OnFallback() {
		if time.Now().After(deadline) {
			t.Fatal("the healthy pacer kept booking in Redis while another worker paced in JetStream")
		}
		reserve(healthy)
		time.Sleep(20 * time.Millisecond)
	}

	// Redis killed: the healthy pacer keeps booking (in JetStream).
	rds.Kill()
	for range 5 {
		reserve(healthy)
	}
	if !healthy.OnFallback() {
		t.Error("with Redis killed the pacer is not on JetStream")
	}
	// Redis back, and the cut-off worker gone: once the mark lapses the
	// healthy pacer returns to Redis, after the JetStream chain's end.
	rds.Restart(t)
	var last time.Time
	deadline = time.Now().Add(10 * time.Second)
	for healthy.OnFallback() {
		if time.Now().After(deadline) {
			t.Fatal("the pacer did not go back to Redis within 10s of its return")
		}
		last = reserve(healthy)
		time.Sleep(50 * time.Millisecond)
	}
	if next := reserve(healthy); next.Before(last) {
		t.Errorf("after the switch back a start at %v comes before the JetStream chain's last %v", next, last)
	}
}

// BenchmarkKVPacerReserve measures one booking's latency in JetStream with
// one worker and with three (each on its own connection, booking at once),
// and the write conflicts per booking; beside it the Redis pacer's.
func BenchmarkKVPacerReserve(b *testing.B) {
	fast := bucket.Rate{Count: 1_000_000_000, Per: time.Second} // never waits
	for _, workers := range []int{1, 3} {
		b.Run("kv/workers="+string(rune('0'+workers)), func(b *testing.B) {
			srv := queuetest.Start(b)
			var ps []*pace.KVPacer
			for range workers {
				kv, err := pace.OpenPacerBucket(context.Background(), srv.JetStream(b), 1)
				if err != nil {
					b.Fatal(err)
				}
				p, err := pace.NewKVPacer(kv, "bench", fast)
				if err != nil {
					b.Fatal(err)
				}
				ps = append(ps, p)
			}
			var (
				next    sync.Mutex
				i       int
				latency atomic.Int64
			)
			b.SetParallelism(2) // ≥ 3 goroutines on 2 cores: one per pacer at least
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				next.Lock()
				p := ps[i%len(ps)]
				i++
				next.Unlock()
				for pb.Next() {
					t0 := time.Now()
					if _, err := p.Reserve(context.Background()); err != nil {
						b.Error(err)
						return
					}
					latency.Add(int64(time.Since(t0)))
				}
			})
			var st pace.KVPacerStats
			for _, p := range ps {
				s := p.Stats()
				st.Bookings += s.Bookings
				st.Conflicts += s.Conflicts
			}
			b.ReportMetric(float64(st.Conflicts)/float64(max(st.Bookings, 1)), "conflicts/booking")
			b.ReportMetric(float64(latency.Load())/float64(max(st.Bookings, 1))/1e3, "µs/reserve")
		})
	}
	b.Run("redis", func(b *testing.B) {
		rds := redistest.Start(b)
		opts, err := redis.ParseURL(rds.URL())
		if err != nil {
			b.Fatal(err)
		}
		c := redis.NewClient(opts)
		b.Cleanup(func() { _ = c.Close() })
		st, err := redisbucket.New(c)
		if err != nil {
			b.Fatal(err)
		}
		p, err := pace.NewPacer(st, "bench", fast)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := p.Reserve(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
