package bucket_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// model is a reference implementation written straight from the formulas of
// The contract's formulas (docs/design.md#algorithms) in exact rational arithmetic (math/big): slow and obviously
// right. The fuzz target compares the integer algorithms with it.
type model struct {
	alg       bucket.Algorithm
	r         *big.Rat // units per nanosecond
	b, d, lim int64
	w         int64
	seen      bool
	e         *big.Rat // leaky excess / token level
	last      int64
	win, c, p int64 // fixed / sliding window
	log       [][2]int64
}

func newModel(l bucket.Limit) *model {
	m := &model{alg: l.Algorithm(), b: l.Burst(), d: l.Delay(), lim: l.Count(), w: int64(l.Window()), e: new(big.Rat)}
	if r := l.Rate(); r.Count > 0 {
		m.r = big.NewRat(r.Count, int64(r.Per))
	}
	return m
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// ceilNs rounds a rational number of nanoseconds up.
func ceilNs(x *big.Rat) int64 {
	q, rem := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// decide returns the verdict and the not-before of a job of cost n at t.
func (m *model) decide(t, n int64) (bucket.Verdict, int64) {
	switch m.alg {
	case bucket.LeakyBucket:
		// e' = max(0, e − Δt·r + 1) + n − 1; a new key: e' = n − 1.
		e := rat(n - 1)
		if m.seen {
			leaked := new(big.Rat).Mul(rat(t-m.last), m.r)
			first := new(big.Rat).Add(new(big.Rat).Sub(m.e, leaked), rat(1))
			if first.Sign() < 0 {
				first.SetInt64(0)
			}
			e.Add(first, rat(n-1))
		}
		if e.Cmp(rat(m.b)) > 0 {
			return bucket.Rejected, t
		}
		m.e, m.last, m.seen = e, t, true
		if e.Cmp(rat(m.d)) <= 0 {
			return bucket.Admitted, t
		}
		wait := new(big.Rat).Quo(new(big.Rat).Sub(e, rat(m.d)), m.r)
		return bucket.Queued, t + ceilNs(wait)
	case bucket.TokenBucket:
		tokens := rat(m.b)
		if m.seen {
			tokens.Add(m.e, new(big.Rat).Mul(rat(t-m.last), m.r))
			if tokens.Cmp(rat(m.b)) > 0 {
				tokens = rat(m.b)
			}
		}
		m.e, m.last, m.seen = tokens, t, true
		if tokens.Cmp(rat(n)) >= 0 {
			m.e = new(big.Rat).Sub(tokens, rat(n))
			return bucket.Admitted, t
		}
		return bucket.Excess, t
	case bucket.FixedWindow:
		win := t / m.w
		if !m.seen || win != m.win {
			m.win, m.c, m.seen = win, 0, true
		}
		if m.c+n <= m.lim {
			m.c += n
			return bucket.Admitted, t
		}
		return bucket.Excess, t
	case bucket.SlidingLog:
		count := int64(0)
		for _, e := range m.log {
			if t-m.w < e[0] && e[0] <= t {
				count += e[1]
			}
		}
		if count+n <= m.lim {
			m.log = append(m.log, [2]int64{t, n})
			return bucket.Admitted, t
		}
		return bucket.Excess, t
	default:
		win := t / m.w
		switch {
		case !m.seen || win > m.win+1:
			m.c, m.p = 0, 0
		case win == m.win+1:
			m.c, m.p = 0, m.c
		}
		m.win, m.seen = win, true
		el := t - win*m.w
		lhs := new(big.Int).Mul(big.NewInt(m.p), big.NewInt(m.w-el))
		lhs.Add(lhs, new(big.Int).Mul(big.NewInt(m.c+n), big.NewInt(m.w)))
		if lhs.Cmp(new(big.Int).Mul(big.NewInt(m.lim), big.NewInt(m.w))) <= 0 {
			m.c += n
			return bucket.Admitted, t
		}
		return bucket.Excess, t
	}
}

// FuzzAlgorithmsAgainstModel checks every algorithm against the rational
// model on fuzzed limits and arrival timelines, and checks the invariant
// that no more is accepted than the limit allows over any stretch of time.
func FuzzAlgorithmsAgainstModel(f *testing.F) {
	f.Add(uint8(0), uint16(1), uint16(1000), uint8(5), uint8(2), []byte{0, 1, 0, 1, 0, 1, 200, 1, 50, 3})
	f.Add(uint8(1), uint16(3), uint16(1000), uint8(4), uint8(0), []byte{0, 1, 10, 2, 255, 1, 0, 4})
	f.Add(uint8(2), uint16(5), uint16(700), uint8(0), uint8(0), []byte{1, 1, 1, 1, 90, 2, 0, 5})
	f.Add(uint8(3), uint16(4), uint16(333), uint8(0), uint8(0), []byte{0, 2, 5, 1, 5, 1, 100, 3})
	f.Add(uint8(4), uint16(7), uint16(1500), uint8(0), uint8(0), []byte{0, 3, 0, 4, 70, 1, 140, 6})
	f.Fuzz(func(t *testing.T, algB uint8, count, perMs uint16, burst, delay uint8, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		alg := bucket.Algorithm(algB % 5)
		var (
			l   bucket.Limit
			err error
		)
		per := time.Duration(max(1, perMs)) * time.Millisecond
		cnt := int64(max(1, count%500))
		switch alg {
		case bucket.LeakyBucket:
			l, err = bucket.NewLeakyBucket(bucket.Rate{Count: cnt, Per: per}, int64(burst), int64(min(delay, burst)))
		case bucket.TokenBucket:
			l, err = bucket.NewTokenBucket(bucket.Rate{Count: cnt, Per: per}, int64(max(1, burst)))
		case bucket.FixedWindow:
			l, err = bucket.NewFixedWindow(cnt, per)
		case bucket.SlidingLog:
			l, err = bucket.NewSlidingLog(cnt, per)
		default:
			l, err = bucket.NewSlidingWindow(cnt, per)
		}
		if err != nil {
			t.Fatalf("%v limit %d/%v burst %d: %v", alg, cnt, per, burst, err)
		}
		m := newModel(l)
		var b bucket.Bucket
		start := int64(1_700_000_000_123_456_789) // Unix ns, off any window boundary
		now := start
		type acc struct{ t, n int64 }
		var accepted []acc
		for i := 0; i+1 < len(ops); i += 2 {
			// The gap grows with the byte so timelines mix bursts and idles.
			g := int64(ops[i])
			now += g * g * g * int64(per) / 1_000_000
			cost := int64(ops[i+1]%6) + 1
			wantV, wantNB := m.decide(now, cost)
			d, err := l.Decide(&b, time.Unix(0, now), cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != wantV || (wantV <= bucket.Queued && d.NotBefore.UnixNano() != wantNB) {
				t.Fatalf("%s, job %d (+%dns, cost %d): got %s not before +%d, model %s not before +%d",
					l, i/2, now-start, cost, d.Verdict, d.NotBefore.UnixNano()-start, wantV, wantNB-start)
			}
			if d.Verdict <= bucket.Queued {
				accepted = append(accepted, acc{now, cost})
			}
		}
		// Invariant: over any stretch [a, b] of arrivals, accepted units ≤
		// quota + rate·(b−a) for buckets; ≤ L per window for windows.
		for i := range accepted {
			var sum int64
			for j := i; j < len(accepted); j++ {
				sum += accepted[j].n
				span := accepted[j].t - accepted[i].t
				var bound *big.Rat
				switch alg {
				case bucket.LeakyBucket, bucket.TokenBucket:
					bound = new(big.Rat).Add(rat(l.Quota()), new(big.Rat).Mul(rat(span), m.r))
				case bucket.SlidingLog:
					if span >= int64(per) {
						continue
					}
					bound = rat(l.Count())
				default:
					if accepted[i].t/int64(per) != accepted[j].t/int64(per) {
						continue
					}
					bound = rat(l.Count())
				}
				if rat(sum).Cmp(bound) > 0 {
					t.Fatalf("%s: %d units accepted within %dns, more than %s", l, sum, span, bound.FloatString(3))
				}
			}
		}
	})
}
