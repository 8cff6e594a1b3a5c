package buckettest

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// ReliabilityFull reports whether the reliability suite runs at full size
// (SPILLWAY_RELIABILITY=full, docs/reliability.md): more goroutines, more
// keys, longer runs.
func ReliabilityFull() bool { return os.Getenv("SPILLWAY_RELIABILITY") == "full" }

// HotKeyCase is one limit of a hot-key test and what it must give.
type HotKeyCase struct {
	Spec bucket.Spec
	// Admitted is how many of the limit's quota are admitted; the rest of
	// the quota is queued.
	Admitted int64
	// Aligned: the algorithm's windows are aligned to the Unix epoch, so
	// on a real clock an hour boundary inside the test would change the
	// count; such limits run on a frozen clock only.
	Aligned bool
}

// HotKeyCases is one limit of each algorithm with a quota of 100 at one
// instant. Rates of 1/h and windows of an hour: within a test no unit
// comes back by itself.
func HotKeyCases() []HotKeyCase {
	return []HotKeyCase{
		{bucket.Spec{Rate: "1/h", Burst: 99, Delay: 49}, 50, false},
		{bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 100}, 100, false},
		{bucket.Spec{Algorithm: "sliding_log", Limit: 100, Window: "1h"}, 100, false},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 100, Window: "1h"}, 100, true},
		{bucket.Spec{Algorithm: "sliding_window", Limit: 100, Window: "1h"}, 100, true},
	}
}

// HotKeyPer is how many decisions each of a hot-key test's goroutines
// makes: 2, or 20 with ReliabilityFull.
func HotKeyPer() int {
	if ReliabilityFull() {
		return 20
	}
	return 2
}

// HotKeyCounts is how many decisions of each verdict one key got.
type HotKeyCounts map[bucket.Verdict]int64

// HotKey releases n goroutines at once, each deciding per jobs of cost 1 on
// one key of store, and counts the verdicts. An error fails the test.
func HotKey(t testing.TB, store bucket.Store, l bucket.Limit, n, per int) HotKeyCounts {
	t.Helper()
	var (
		mu     sync.Mutex
		counts = HotKeyCounts{}
		errs   = make(chan error, n)
		wg     sync.WaitGroup
		gate   = make(chan struct{})
	)
	tiers := []bucket.Tier{{Key: "hot", Limit: l}}
	for range n {
		wg.Go(func() {
			local := HotKeyCounts{}
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

// CheckHotKey fails the test unless got, total decisions of n goroutines
// on one key with limit l, is exactly c.Admitted admitted, the rest of the
// quota queued and every other decision refused; it logs the figures.
// how names the run ("memory, frozen clock").
func CheckHotKey(t testing.TB, l bucket.Limit, c HotKeyCase, how string, got HotKeyCounts, n, total int) {
	t.Helper()
	quota := l.Quota()
	refused := got[bucket.Excess] + got[bucket.Rejected]
	t.Logf("figure: %s: %s, %s, %d decisions from %d goroutines on one key: %d admitted, %d queued, %d refused (quota %d, %d admitted)",
		t.Name(), l, how, total, n, got[bucket.Admitted], got[bucket.Queued], refused, quota, c.Admitted)
	if got[bucket.Admitted] != c.Admitted || got[bucket.Queued] != quota-c.Admitted || refused != int64(total)-quota {
		t.Errorf("%s, %s: %d admitted, %d queued, %d refused; want exactly %d, %d, %d",
			l, how, got[bucket.Admitted], got[bucket.Queued], refused, c.Admitted, quota-c.Admitted, int64(total)-quota)
	}
}
