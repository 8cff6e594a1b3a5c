package bucket_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	buckettest.Exercise(t, func(t *testing.T, clock func() time.Time) bucket.Store {
		s, err := bucket.NewMemory(bucket.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A small store used by many keys keeps to its bound, evicting keys not used
// recently and keeping one in use.
func TestMemoryEvictsKeysNotUsedRecently(t *testing.T) {
	t.Parallel()
	clock := buckettest.NewClock(buckettest.Base)
	s, err := bucket.NewMemory(bucket.WithMaxKeys(64), bucket.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := bucket.NewLeakyBucket(bucket.Rate{Count: 1, Per: time.Hour}, 0, 0)
	decide := func(key string) bucket.Verdict {
		d, err := s.Decide(context.Background(), "g", []bucket.Tier{{Key: key, Limit: l}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Verdict
	}
	decide("keep")
	for i := range 1000 {
		decide(fmt.Sprint("spray-", i))
		if i%10 == 0 {
			decide("keep") // stays recently used
		}
	}
	st := s.Stats()
	if st.Keys > 64 || st.Evictions != 1001-64 {
		t.Fatalf("stats %+v, want 64 keys and %d evictions", st, 1001-64)
	}
	if v := decide("keep"); v != bucket.Rejected {
		t.Fatalf("a recently used key was evicted: %s, want rejected", v)
	}
	if v := decide("spray-0"); v != bucket.Admitted {
		t.Fatalf("the least recently used key was kept: %s, want admitted", v)
	}
}

// Keys whose state is empty again are forgotten without a sweeper goroutine.
func TestMemoryForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	clock := buckettest.NewClock(buckettest.Base)
	s, _ := bucket.NewMemory(bucket.WithClock(clock.Now), bucket.WithMaxKeys(1000))
	l, _ := bucket.NewLeakyBucket(bucket.Rate{Count: 10, Per: time.Second}, 5, 0)
	for i := range 500 {
		if _, err := s.Decide(context.Background(), "g", []bucket.Tier{{Key: fmt.Sprint(i), Limit: l}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if k := s.Stats().Keys; k != 500 {
		t.Fatalf("%d keys tracked, want 500", k)
	}
	clock.Set(buckettest.Base.Add(2 * time.Second))
	for i := range 500 {
		if _, err := s.Decide(context.Background(), "g", []bucket.Tier{{Key: fmt.Sprint("x", i), Limit: l}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Forgotten < 500 || st.Evictions != 0 {
		t.Fatalf("stats %+v: want the 500 idle keys forgotten, nothing evicted", st)
	}
}

// TestMemoryBytesPerKey measures the heap a tracked key costs at 1M keys.
// The target is ≤ 64 bytes (nginx's limit_req needs 128).
func TestMemoryBytesPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million keys")
	}
	const n = 1_000_000
	l, _ := bucket.NewLeakyBucket(bucket.Rate{Count: 1, Per: time.Hour}, 10, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	now := time.Now()
	s, err := bucket.NewMemory(bucket.WithMaxKeys(n), bucket.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	tier := make([]bucket.Tier, 1)
	buf := make([]byte, 0, 64)
	for i := range n {
		// Keys are built in one reused buffer: only the store's own memory
		// stays live between the two readings.
		buf = fmt.Appendf(buf[:0], "203.0.113.%d:%d", i%256, i)
		tier[0] = bucket.Tier{Key: string(buf), Limit: l}
		if _, err := s.Decide(t.Context(), "g", tier, 1); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if st := s.Stats(); st.Keys != n || st.Evictions != 0 {
		t.Fatalf("stats %+v, want %d keys", st, n)
	}
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("memory store: %.1f bytes per key at %d keys (heap %d → %d)", perKey, n, before.HeapAlloc, after.HeapAlloc)
	if perKey > 64 {
		t.Errorf("%.1f bytes per key, want ≤ 64", perKey)
	}
	runtime.KeepAlive(s)
}

func TestMemoryDecideDoesNotAllocate(t *testing.T) {
	s, _ := bucket.NewMemory()
	l1, _ := bucket.NewLeakyBucket(bucket.Rate{Count: 1000, Per: time.Second}, 100, 10)
	l2, _ := bucket.NewTokenBucket(bucket.Rate{Count: 5000, Per: time.Second}, 100)
	tiers := []bucket.Tier{{Key: "client-42", Limit: l1}, {Key: "global", Limit: l2}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := s.Decide(ctx, "email", tiers, 1); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decision, want 0", allocs)
	}
}
