package loadgen

import (
	"math"
	"math/bits"
)

// subBits sets the histogram's resolution: each power of two is split into
// 2^subBits buckets of equal width.
const subBits = 7

const subCount = 1 << subBits

// Histogram counts non-negative int64 values (latencies in nanoseconds) in
// log-linear buckets, as HdrHistogram does: values below 2^7 each have
// their own bucket, and each power of two above is split into 128 buckets
// of equal width, so a bucket is never wider than 1/128 of its lower bound.
// A quantile is reported as the middle of the bucket that holds it, which
// is within 1/256 (0.4%) of the exact value. Min, max and count are exact.
//
// Memory grows with the largest value: about 7,400 counters (58 KiB) for
// values up to 2^63. The zero value is an empty histogram ready to use. A
// Histogram is not safe for concurrent use.
type Histogram struct {
	counts   []uint64
	n        uint64
	min, max int64
	sum      float64
}

// bucketOf is the index of v's bucket (v ≥ 0).
func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return (shift+1)*subCount + int(v>>shift) - subCount
}

// bucketRange is the values of bucket i: lo to hi, both included.
func bucketRange(i int) (lo, hi int64) {
	if i < 2*subCount {
		return int64(i), int64(i)
	}
	shift := i/subCount - 1
	mantissa := int64(i%subCount + subCount)
	lo = mantissa << shift
	return lo, lo + (int64(1) << shift) - 1
}

// Record counts one value; a negative value counts as 0.
func (h *Histogram) Record(v int64) {
	v = max(v, 0)
	i := bucketOf(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are the smallest and largest values recorded, exactly (0
// when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest value recorded.
func (h *Histogram) Max() int64 { return h.max }

// Mean is the average of the values recorded (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q (0 < q ≤ 1) by the nearest-rank
// definition — the ⌈q·n⌉-th smallest value — within 0.4%: the middle of
// its bucket, kept between Min and Max. Quantile(1) is Max exactly. An
// empty histogram returns 0.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			return min(max(lo+(hi-lo)/2, h.min), h.max)
		}
	}
	return h.max
}
