package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Every value lies in the range of its bucket, buckets tile the values
// without gaps, and no bucket is wider than 1/128 of its lower bound.
func TestBucketsTileTheValues(t *testing.T) {
	t.Parallel()
	check := func(v int64) {
		i := bucketOf(v)
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
		if lo >= subCount && float64(hi-lo+1) > float64(lo)/subCount {
			t.Fatalf("bucket %d = [%d, %d] is wider than 1/%d of %d", i, lo, hi, subCount, lo)
		}
		if i > 0 {
			if _, prevHi := bucketRange(i - 1); prevHi != lo-1 {
				t.Fatalf("bucket %d starts at %d but bucket %d ends at %d", i, lo, i-1, prevHi)
			}
		}
	}
	for v := range int64(100_000) {
		check(v)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		check(rng.Int64N(math.MaxInt64))
	}
	check(math.MaxInt64)
	if _, hi := bucketRange(bucketOf(math.MaxInt64)); hi != math.MaxInt64 {
		t.Fatalf("the last bucket ends at %d", hi)
	}
}

func FuzzBucketOf(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(255))
	f.Add(int64(256))
	f.Add(int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, v int64) {
		v = max(v, 0)
		lo, hi := bucketRange(bucketOf(v))
		if v < lo || v > hi {
			t.Fatalf("value %d in [%d, %d]", v, lo, hi)
		}
	})
}

// Quantiles agree with the exact nearest-rank percentiles of the sorted
// samples to within 1/256, on shapes latencies take.
func TestQuantilesMatchSortedSamples(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	shapes := map[string]func() int64{
		"uniform 0-10ms": func() int64 { return rng.Int64N(10_000_000) },
		"lognormal ~1ms": func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5) * 1e6) },
		"exponential":    func() int64 { return int64(rng.ExpFloat64() * 2e6) },
		"bimodal with a tail": func() int64 {
			switch x := rng.IntN(1000); {
			case x < 700:
				return 200_000 + rng.Int64N(50_000)
			case x < 995:
				return 5_000_000 + rng.Int64N(1_000_000)
			default:
				return 2_000_000_000 + rng.Int64N(3_000_000_000)
			}
		},
		"small integers": func() int64 { return rng.Int64N(300) },
		"constant":       func() int64 { return 1_234_567 },
	}
	for name, next := range shapes {
		for _, n := range []int{1, 7, 1000, 200_000} {
			var h Histogram
			samples := make([]int64, n)
			for i := range samples {
				samples[i] = next()
				h.Record(samples[i])
			}
			slices.Sort(samples)
			for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
				exact := samples[max(0, int(math.Ceil(q*float64(n)))-1)]
				got := h.Quantile(q)
				if diff := math.Abs(float64(got - exact)); diff > float64(exact)/256 {
					t.Errorf("%s, %d samples: q%v = %d, exact %d (off by %.3f%%)", name, n, q, got, exact, 100*diff/float64(exact))
				}
			}
			if h.Min() != samples[0] || h.Max() != samples[n-1] || h.Count() != uint64(n) {
				t.Errorf("%s: min %d max %d count %d, want %d %d %d", name, h.Min(), h.Max(), h.Count(), samples[0], samples[n-1], n)
			}
		}
	}
}

func TestHistogramMergeAndEmpty(t *testing.T) {
	t.Parallel()
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 || empty.Max() != 0 {
		t.Fatal("an empty histogram reports non-zero figures")
	}
	var a, b, all Histogram
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 10_000 {
		v := rng.Int64N(1e9)
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	a.Merge(&empty)
	for _, q := range []float64{0.5, 0.99, 1} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Errorf("merged q%v = %d, recorded together %d", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if a.Count() != all.Count() || a.Min() != all.Min() || math.Abs(a.Mean()-all.Mean()) > 1e-3*all.Mean() {
		t.Errorf("merged count/min/mean %d %d %f, want %d %d %f", a.Count(), a.Min(), a.Mean(), all.Count(), all.Min(), all.Mean())
	}
	var neg Histogram
	neg.Record(-5)
	if neg.Min() != 0 || neg.Quantile(0.5) != 0 {
		t.Errorf("a negative value is not counted as 0")
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	rng := rand.New(rand.NewPCG(1, 1))
	vs := make([]int64, 1024)
	for i := range vs {
		vs[i] = rng.Int64N(1e10)
	}
	b.ResetTimer()
	for i := range b.N {
		h.Record(vs[i&1023])
	}
}
