package admit_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/testkit/metrictest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// redisStore starts a redis-server of the test's own (it is killed and
// restarted) and returns it with the shared store an admitter builds on
// it (internal/conn: short timeouts, no retries).
func redisStore(t *testing.T) (*redistest.Server, bucket.Store) {
	t.Helper()
	srv := redistest.Start(t, redistest.WithOwnProcess())
	// A decision budget far above a loaded machine's stalls: these tests
	// are about outages and answers, not about a slow Redis.
	client, store, err := conn.Redis(conn.RedisConfig{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return srv, store
}

// leaky1m is rate 1/m, burst 2, delay 2: three jobs of a key are admitted,
// the fourth is rejected, and within a test nothing leaks out measurably.
func leaky1m(t *testing.T, key string) []bucket.Tier {
	t.Helper()
	l, err := bucket.NewLeakyBucket(bucket.Rate{Count: 1, Per: time.Minute}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	return []bucket.Tier{{Key: key, Limit: l}}
}

type decided struct {
	Verdict bucket.Verdict
	Source  admit.Source
}

func decideN(t *testing.T, f *admit.Failover, tiers []bucket.Tier, n int) []decided {
	t.Helper()
	var out []decided
	for range n {
		d, src, err := f.DecideFrom(context.Background(), "q", tiers, 1)
		if err != nil {
			t.Fatalf("DecideFrom: %v (source %d)", err, src)
		}
		out = append(out, decided{d.Verdict, src})
	}
	return out
}

// limited is what leaky1m says about four jobs of a fresh key, decided by
// src.
func limited(src admit.Source) []decided {
	return []decided{{bucket.Admitted, src}, {bucket.Admitted, src}, {bucket.Admitted, src}, {bucket.Rejected, src}}
}

func sameDecisions(t *testing.T, what string, got, want []decided) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// waitPrimary decides with fresh keys until the shared store decides again.
func waitPrimary(t *testing.T, f *admit.Failover, key string) {
	t.Helper()
	n := 0
	admittest.WaitFor(t, 15*time.Second, "the shared store deciding again after its restart", func() bool {
		n++
		_, src, err := f.DecideFrom(context.Background(), "q", leaky1m(t, key+"-probe-"+strconv.Itoa(n)), 1)
		return err == nil && src == admit.FromPrimary
	})
	if down, _ := f.Down(); down {
		t.Fatal("the shared store decided, yet Down still reports it unreachable")
	}
}

func TestFailoverModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []config.FailureMode{config.FailOpen, config.FailClosed, config.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			srv, store := redisStore(t)
			f, err := admit.NewFailover(store, mode)
			if err != nil {
				t.Fatal(err)
			}
			var errs, fallbacks int
			f.OnError = func(error) { errs++ }
			f.OnFallback = func(m config.FailureMode) {
				if m != mode {
					t.Errorf("OnFallback(%q) in mode %q", m, mode)
				}
				fallbacks++
			}

			sameDecisions(t, "Redis up", decideN(t, f, leaky1m(t, "up"), 4), limited(admit.FromPrimary))
			if down, _ := f.Down(); down {
				t.Fatal("Down with Redis up")
			}

			srv.Kill()
			tiers := leaky1m(t, "down")
			switch mode {
			case config.FailOpen:
				// Everything admitted, beyond the limit, with no store.
				got := decideN(t, f, tiers, 6)
				for _, g := range got {
					if g != (decided{bucket.Admitted, admit.FromOpen}) {
						t.Fatalf("open, Redis down: %v, want every job admitted from the failure mode", got)
					}
				}
			case config.FailLocal:
				// The same limits, in this process's memory.
				sameDecisions(t, "local, Redis down", decideN(t, f, tiers, 4), limited(admit.FromLocal))
			case config.FailClosed:
				for i := range 3 {
					d, src, err := f.DecideFrom(context.Background(), "q", tiers, 1)
					if !errors.Is(err, admit.ErrStoreUnavailable) || src != admit.FromClosed {
						t.Fatalf("closed, Redis down, decision %d: source %d, err %v; want FromClosed and ErrStoreUnavailable", i, src, err)
					}
					if d.RetryAfter <= 0 {
						t.Fatalf("closed, Redis down: RetryAfter %v, want > 0", d.RetryAfter)
					}
				}
			}
			down, wait := f.Down()
			if !down || wait < 0 {
				t.Fatalf("Redis killed: Down() = %v, %v; want true and a wait ≥ 0", down, wait)
			}
			if errs == 0 || fallbacks == 0 {
				t.Errorf("Redis killed: OnError called %d times, OnFallback %d; want both", errs, fallbacks)
			}

			srv.Restart(t)
			waitPrimary(t, f, "back")
			// An empty Redis, deciding at the limits again.
			sameDecisions(t, "Redis back", decideN(t, f, leaky1m(t, "back"), 4), limited(admit.FromPrimary))
		})
	}
}

// TestFailoverRequestErrorsAreNotOutages: a request the store refuses
// (invalid cost, duplicate tier keys, an unbuilt limit) says nothing about
// the store's health: the store stays up and the next decision is its own.
func TestFailoverRequestErrorsAreNotOutages(t *testing.T) {
	t.Parallel()
	_, store := redisStore(t)
	f, err := admit.NewFailover(store, config.FailClosed)
	if err != nil {
		t.Fatal(err)
	}
	f.OnError = func(err error) { t.Errorf("OnError(%v) for a request error", err) }
	f.OnFallback = func(m config.FailureMode) { t.Errorf("OnFallback(%s) for a request error", m) }
	good := leaky1m(t, "k")
	dup := append(leaky1m(t, "k"), good[0])
	for _, c := range []struct {
		name  string
		tiers []bucket.Tier
		cost  int64
		want  error
	}{
		{"cost 0", good, 0, bucket.ErrInvalidCost},
		{"cost -1", good, -1, bucket.ErrInvalidCost},
		{"duplicate keys", dup, 1, bucket.ErrDuplicateKey},
		{"unbuilt limit", []bucket.Tier{{Key: "z"}}, 1, bucket.ErrInvalidLimit},
		{"no tiers", nil, 1, bucket.ErrTooManyTiers},
	} {
		_, src, err := f.DecideFrom(context.Background(), "q", c.tiers, c.cost)
		if !errors.Is(err, c.want) || src != admit.FromPrimary {
			t.Errorf("%s: source %d, err %v; want FromPrimary and %v", c.name, src, err, c.want)
		}
		if down, _ := f.Down(); down {
			t.Fatalf("%s marked the store down", c.name)
		}
	}
	sameDecisions(t, "after the request errors", decideN(t, f, good, 4), limited(admit.FromPrimary))
}

// TestFailoverMetrics: an admitter counts the store's failures and the
// failure mode's decisions.
func TestFailoverMetrics(t *testing.T) {
	t.Parallel()
	srv, store := redisStore(t)
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 0}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{primary: store, mode: config.FailOpen})
	if ans := submit(t, a, request("q", "c")); ans.Source != admit.FromPrimary || ans.Reply.Status != "admitted" {
		t.Fatalf("Redis up: %+v", ans)
	}
	srv.Kill()
	for range 3 {
		if ans := submit(t, a, request("q", "c")); ans.Source != admit.FromOpen || ans.Reply.Status != "admitted" {
			t.Fatalf("Redis down, open: source %d, reply %+v; want admitted from the failure mode", ans.Source, ans.Reply)
		}
	}
	wantSamples(t, b.reg, "spillway_decisions_total", map[string]float64{
		"queue=q,reason=limit,verdict=admitted":             1,
		"queue=q,reason=failure_mode_open,verdict=admitted": 3,
	})
	wantSamples(t, b.reg, "spillway_failure_mode_total", map[string]float64{"mode=open": 3})
	// One failed decision marks the store down; the others fall back
	// without trying it (the backoff), unless a probe fell due meanwhile.
	if n := metrictest.Sum(t, b.reg, "spillway_store_errors_total"); n < 1 || n > 3 {
		t.Errorf("spillway_store_errors_total = %v, want 1 to 3", n)
	}
}

// TestFailoverSetMode: a reload's failure mode takes over the decisions
// of an outage already under way; an unknown mode is refused and changes
// nothing.
func TestFailoverSetMode(t *testing.T) {
	t.Parallel()
	srv, store := redisStore(t)
	f, err := admit.NewFailover(store, config.FailOpen)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	tiers := leaky1m(t, "k")
	if got := decideN(t, f, tiers, 4); got[3] != (decided{bucket.Admitted, admit.FromOpen}) {
		t.Fatalf("open, Redis down: %v, want every job admitted by the failure mode", got)
	}
	if err := f.SetMode("ajar"); err == nil || f.Mode() != config.FailOpen {
		t.Errorf("SetMode(ajar): %v, mode %s; want an error and open kept", err, f.Mode())
	}
	if err := f.SetMode(config.FailLocal); err != nil || f.Mode() != config.FailLocal {
		t.Fatalf("SetMode(local): %v, mode %s", err, f.Mode())
	}
	want := []decided{{bucket.Admitted, admit.FromLocal}, {bucket.Admitted, admit.FromLocal}, {bucket.Admitted, admit.FromLocal}, {bucket.Rejected, admit.FromLocal}}
	if got := decideN(t, f, tiers, 4); !slices.Equal(got, want) {
		t.Errorf("local after SetMode, Redis down: %v, want %v (the limit, in memory)", got, want)
	}
	if err := f.SetMode(config.FailClosed); err != nil {
		t.Fatal(err)
	}
	if _, src, err := f.DecideFrom(context.Background(), "q", tiers, 1); !errors.Is(err, admit.ErrStoreUnavailable) || src != admit.FromClosed {
		t.Errorf("closed after SetMode, Redis down: source %d, %v; want ErrStoreUnavailable", src, err)
	}
}
