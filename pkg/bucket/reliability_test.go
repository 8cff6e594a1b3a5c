package bucket_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// hotKeySpecs is one limit of each algorithm with a quota of 100 at one
// instant, and how many of those 100 are admitted (the rest of a leaky
// bucket's quota is queued). Rates of 1/h and windows of an hour: within a
// test no unit comes back by itself.
var hotKeySpecs = []struct {
	spec     bucket.Spec
	admitted int64
	// aligned: the algorithm's windows are aligned to the Unix epoch, so
	// on a real clock an hour boundary inside the test would change the
	// count; such limits run on a frozen clock only.
	aligned bool
}{
	{bucket.Spec{Rate: "1/h", Burst: 99, Delay: 49}, 50, false},
	{bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 100}, 100, false},
	{bucket.Spec{Algorithm: "sliding_log", Limit: 100, Window: "1h"}, 100, false},
	{bucket.Spec{Algorithm: "fixed_window", Limit: 100, Window: "1h"}, 100, true},
	{bucket.Spec{Algorithm: "sliding_window", Limit: 100, Window: "1h"}, 100, true},
}

// TestReliabilityHotKeyMemory: 1,000 goroutines released
// at once on one key of the memory store get exactly what each algorithm
// allows — the quota accepted, split into admitted and queued as the
// algorithm says, every other decision refused — on a frozen clock (every
// algorithm) and on the store's own clock (the algorithms whose windows are
// not epoch-aligned). Run it under -race.
func TestReliabilityHotKeyMemory(t *testing.T) {
	t.Parallel()
	per := 2
	if os.Getenv("SPILLWAY_RELIABILITY") == "full" {
		per = 20
	}
	frozen := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, c := range hotKeySpecs {
		l, err := c.spec.Build()
		if err != nil {
			t.Fatal(err)
		}
		for _, clock := range []string{"frozen", "real"} {
			if clock == "real" && c.aligned {
				continue
			}
			var opts []bucket.MemoryOption
			if clock == "frozen" {
				opts = append(opts, bucket.WithClock(func() time.Time { return frozen }))
			}
			store, err := bucket.NewMemory(opts...)
			if err != nil {
				t.Fatal(err)
			}
			got := hotKey(t, store, l, 1000, per)
			checkHotKey(t, l, clock, got, c.admitted, 1000*per)
		}
	}
}

// hotKeyCounts is how many decisions of each verdict one key got.
type hotKeyCounts map[bucket.Verdict]int64

// hotKey releases n goroutines at once, each deciding per jobs of cost 1 on
// the same key, and counts the verdicts.
func hotKey(t *testing.T, store bucket.Store, l bucket.Limit, n, per int) hotKeyCounts {
	t.Helper()
	var (
		mu     sync.Mutex
		counts = hotKeyCounts{}
		errs   = make(chan error, n)
		wg     sync.WaitGroup
		gate   = make(chan struct{})
	)
	tiers := []bucket.Tier{{Key: "hot", Limit: l}}
	for range n {
		wg.Go(func() {
			local := hotKeyCounts{}
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

func checkHotKey(t *testing.T, l bucket.Limit, clock string, got hotKeyCounts, admitted int64, total int) {
	t.Helper()
	quota := l.Quota()
	refused := got[bucket.Excess] + got[bucket.Rejected]
	t.Logf("figure: %s: %s, %s clock, %d decisions from 1000 goroutines on one key: %d admitted, %d queued, %d refused (quota %d, %d admitted)",
		t.Name(), l, clock, total, got[bucket.Admitted], got[bucket.Queued], refused, quota, admitted)
	if got[bucket.Admitted] != admitted || got[bucket.Queued] != quota-admitted || refused != int64(total)-quota {
		t.Errorf("%s, %s clock: %d admitted, %d queued, %d refused; want exactly %d, %d, %d",
			l, clock, got[bucket.Admitted], got[bucket.Queued], refused, admitted, quota-admitted, int64(total)-quota)
	}
}
