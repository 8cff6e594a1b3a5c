package bucket_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
)

// The reliability suite (docs/reliability.md): a client spraying distinct keys
// cannot grow the memory store past its key cap, and cannot push a
// legitimate key out of its limit.

// sprayRSS is the process's resident set (VmRSS of /proc/self/status).
func sprayRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("reading the RSS: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func sprayHeap() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// TestReliabilityKeySprayMemory sprays distinct keys through one tier of a
// capped memory store at an injected clock, as many keys per second as the
// cap holds (so twice the cap is live at any time), while a legitimate key
// sends a job every 500 spray keys. It checks that
//
//   - the store never tracks more keys than its cap, and evicts the rest;
//   - the heap the store keeps, after the spray, is within 96 bytes per
//     key of the cap, and the process's resident set stays within a
//     bound set by the cap, not by the number of keys sprayed;
//   - every decision on the legitimate key is exactly the decision a
//     store that saw no spray takes on the same timeline.
//
// Not parallel: the resident set is the whole process's.
func TestReliabilityKeySprayMemory(t *testing.T) {
	type run struct {
		keys, cap int
	}
	runs := []run{{300_000, 30_000}}
	if buckettest.ReliabilityFull() {
		runs = []run{{1_000_000, 100_000}, {3_000_000, bucket.DefaultMaxKeys}}
	}
	for _, r := range runs {
		t.Run(fmt.Sprintf("keys=%d,cap=%d", r.keys, r.cap), func(t *testing.T) {
			spray(t, r.keys, r.cap)
		})
	}
}

func spray(t *testing.T, keys, maxKeys int) {
	// The sprayed tier: a key stays at least 2 s (a unit in service for
	// 1 s, forgotten a second after). The spray sends maxKeys keys per
	// second, so twice as many keys are live as the cap holds: the cap,
	// not forgetting, bounds them.
	step := time.Second / time.Duration(maxKeys)
	const legitGap = 500 // spray keys between two legitimate jobs
	l, err := bucket.NewLeakyBucket(bucket.Rate{Count: 1, Per: time.Second}, 5, 5)
	if err != nil {
		t.Fatal(err)
	}
	// The legitimate key's tier: 20/s, burst 10, 2 of them at once.
	legit, err := bucket.NewLeakyBucket(bucket.Rate{Count: 20, Per: time.Second}, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_800_000_000, 0)
	now := start
	clock := func() time.Time { return now }

	runtime.GC()
	debug.FreeOSMemory()
	rss0, heap0 := sprayRSS(t), sprayHeap()
	s, err := bucket.NewMemory(bucket.WithMaxKeys(maxKeys), bucket.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := bucket.NewMemory(bucket.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	sprayTier := make([]bucket.Tier, 1)
	legitTier := []bucket.Tier{{Key: "0:legitimate-client", Limit: legit}}
	buf := make([]byte, 0, 32)
	peakRSS, peakKeys := rss0, 0
	var legitJobs, legitAdmitted, legitQueued, mismatches int
	began := time.Now()
	for i := range keys {
		now = now.Add(step)
		buf = strconv.AppendInt(append(buf[:0], "0:spray-"...), int64(i), 10)
		sprayTier[0] = bucket.Tier{Key: string(buf), Limit: l}
		if _, err := s.Decide(t.Context(), "q", sprayTier, 1); err != nil {
			t.Fatal(err)
		}
		if i%legitGap == 0 {
			got, err := s.Decide(t.Context(), "q", legitTier, 1)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ref.Decide(t.Context(), "q", legitTier, 1)
			if err != nil {
				t.Fatal(err)
			}
			legitJobs++
			switch got.Verdict {
			case bucket.Admitted:
				legitAdmitted++
			case bucket.Queued:
				legitQueued++
			}
			if !sameAnswer(got, want) {
				mismatches++
				if mismatches <= 5 {
					t.Errorf("legitimate job %d at +%v during the spray: %+v; without the spray: %+v", legitJobs, now.Sub(start), got, want)
				}
			}
		}
		if i%50_000 == 0 {
			peakRSS = max(peakRSS, sprayRSS(t))
			peakKeys = max(peakKeys, s.Stats().Keys)
		}
	}
	elapsed := time.Since(began)
	peakRSS = max(peakRSS, sprayRSS(t))
	st := s.Stats()
	peakKeys = max(peakKeys, st.Keys)
	runtime.GC()
	heapGrowth := sprayHeap() - heap0
	runtime.KeepAlive(s)
	runtime.KeepAlive(ref)

	t.Logf("figure: %s: %d distinct keys in %v (%.0f keys/s wall) into a memory store capped at %d: peak %d keys tracked, %d evicted, %d forgotten; "+
		"store heap after GC %.1f MiB (%.1f B per cap key); peak RSS %.1f MiB (+%.1f MiB over the %.1f MiB before); legitimate key: %d jobs, %d admitted, %d queued, %d decisions differing from a store without the spray",
		t.Name(), keys, elapsed.Round(time.Millisecond), float64(keys)/elapsed.Seconds(), maxKeys, peakKeys, st.Evictions, st.Forgotten,
		sprayMiB(heapGrowth), float64(heapGrowth)/float64(maxKeys), sprayMiB(peakRSS), sprayMiB(peakRSS-rss0), sprayMiB(rss0),
		legitJobs, legitAdmitted, legitQueued, mismatches)

	if peakKeys > maxKeys || st.Keys > maxKeys {
		t.Errorf("the store tracked %d keys (%d at the end), over its cap of %d", peakKeys, st.Keys, maxKeys)
	}
	// Every spray key past the cap pushed one out (or was forgotten): the
	// spray went through the eviction path, not around it.
	if dropped := st.Evictions + st.Forgotten; int(dropped) < keys-maxKeys {
		t.Errorf("%d keys sprayed into a cap of %d, but only %d evicted and %d forgotten", keys, maxKeys, st.Evictions, st.Forgotten)
	}
	if st.Evictions == 0 {
		t.Errorf("no eviction: the spray did not fill the store (%+v)", st)
	}
	if limit := int64(maxKeys)*96 + 1<<20; heapGrowth > limit {
		t.Errorf("the store holds %.1f MiB of heap after the spray, want ≤ %.1f MiB (96 B per cap key + 1 MiB)", sprayMiB(heapGrowth), sprayMiB(limit))
	}
	// The resident set: the store's bound, the garbage the sprayed key
	// strings leave between two collections, and (under -race) the race
	// detector's shadow of both. Were the store unbounded it would grow
	// with the keys sprayed (42 B each, 42 MiB per million).
	if limit := int64(maxKeys)*96*4 + 64<<20; peakRSS-rss0 > limit {
		t.Errorf("the resident set grew by %.1f MiB during the spray, want ≤ %.1f MiB", sprayMiB(peakRSS-rss0), sprayMiB(limit))
	}
	if mismatches > 0 {
		t.Errorf("%d of %d decisions on the legitimate key differed from those without the spray", mismatches, legitJobs)
	}
	if legitAdmitted == 0 || legitAdmitted+legitQueued == legitJobs {
		t.Errorf("the legitimate key: %d admitted, %d queued of %d; want its limit to bite (some rejected)", legitAdmitted, legitQueued, legitJobs)
	}
}

func sprayMiB(n int64) float64 { return float64(n) / (1 << 20) }

// sameAnswer reports whether two stores answered alike: every field but
// the store and request each Decision carries for its refund.
func sameAnswer(a, b bucket.Decision) bool {
	return a.Verdict == b.Verdict && a.At.Equal(b.At) && a.NotBefore.Equal(b.NotBefore) && a.Tier == b.Tier &&
		a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter &&
		a.Consumed == b.Consumed && a.TierAt == b.TierAt
}
