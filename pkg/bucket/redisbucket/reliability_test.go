package redisbucket_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// hotKeySpecs is one limit of each algorithm with a quota of 100 at one
// instant, and how many of those are admitted (the rest of a leaky bucket's
// quota is queued). Rates of 1/h and windows of an hour: within a test no
// unit comes back by itself.
var hotKeySpecs = []struct {
	spec     bucket.Spec
	admitted int64
	// aligned: windows aligned to the Unix epoch, so an hour boundary inside
	// the test would change the count on a real clock; frozen clock only.
	aligned bool
}{
	{bucket.Spec{Rate: "1/h", Burst: 99, Delay: 49}, 50, false},
	{bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 100}, 100, false},
	{bucket.Spec{Algorithm: "sliding_log", Limit: 100, Window: "1h"}, 100, false},
	{bucket.Spec{Algorithm: "fixed_window", Limit: 100, Window: "1h"}, 100, true},
	{bucket.Spec{Algorithm: "sliding_window", Limit: 100, Window: "1h"}, 100, true},
}

// TestReliabilityHotKeyRedis: 1,000 goroutines released
// at once on one key of the Redis store get exactly what each algorithm
// allows, both through the coalesced round trips (the default: batches of
// up to 64 decisions, 2 in flight) and with coalescing off and 64 scripts
// racing in the server; at Redis TIME (the algorithms whose windows are not
// epoch-aligned) and on a frozen injected clock (every algorithm). Run it
// under -race.
func TestReliabilityHotKeyRedis(t *testing.T) {
	t.Parallel()
	per := 2
	if os.Getenv("SPILLWAY_RELIABILITY") == "full" {
		per = 20
	}
	srv := redistest.Start(t)
	client := newClient(t, srv)
	frozen := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	paths := []struct {
		name string
		opts []redisbucket.Option
	}{
		{"coalesced", nil},
		{"one script per decision, 64 in flight", []redisbucket.Option{redisbucket.WithMaxBatch(1), redisbucket.WithMaxInFlight(64)}},
	}
	for _, c := range hotKeySpecs {
		l := mustLimit(t, c.spec)
		for _, clock := range []string{"frozen", "Redis TIME"} {
			if clock != "frozen" && c.aligned {
				continue
			}
			for _, p := range paths {
				opts := append([]redisbucket.Option{redisbucket.WithPrefix(redistest.KeyPrefix(t))}, p.opts...)
				if clock == "frozen" {
					opts = append(opts, redisbucket.WithClock(func() time.Time { return frozen }))
				}
				store, err := redisbucket.New(client, opts...)
				if err != nil {
					t.Fatal(err)
				}
				got := hotKey(t, store, l, 1000, per)
				quota := l.Quota()
				refused := got[bucket.Excess] + got[bucket.Rejected]
				total := int64(1000 * per)
				t.Logf("figure: %s: %s, %s, %s clock, %d decisions from 1000 goroutines on one key: %d admitted, %d queued, %d refused (quota %d, %d admitted)",
					t.Name(), l, p.name, clock, total, got[bucket.Admitted], got[bucket.Queued], refused, quota, c.admitted)
				if got[bucket.Admitted] != c.admitted || got[bucket.Queued] != quota-c.admitted || refused != total-quota {
					t.Errorf("%s, %s, %s clock: %d admitted, %d queued, %d refused; want exactly %d, %d, %d",
						l, p.name, clock, got[bucket.Admitted], got[bucket.Queued], refused, c.admitted, quota-c.admitted, total-quota)
				}
			}
		}
	}
}

// hotKey releases n goroutines at once, each deciding per jobs of cost 1 on
// the same key, and counts the verdicts.
func hotKey(t *testing.T, store bucket.Store, l bucket.Limit, n, per int) map[bucket.Verdict]int64 {
	t.Helper()
	var (
		mu     sync.Mutex
		counts = map[bucket.Verdict]int64{}
		errs   = make(chan error, n)
		wg     sync.WaitGroup
		gate   = make(chan struct{})
	)
	tiers := []bucket.Tier{{Key: "hot", Limit: l}}
	for range n {
		wg.Go(func() {
			local := map[bucket.Verdict]int64{}
			<-gate
			for range per {
				d, err := store.Decide(context.Background(), "g", tiers, 1)
				if err != nil {
					errs <- err
					return
				}
				local[d.Verdict]++
			}
			mu.Lock()
			for v, k := range local {
				counts[v] += k
			}
			mu.Unlock()
		})
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%s: %v", l, err)
	}
	return counts
}
