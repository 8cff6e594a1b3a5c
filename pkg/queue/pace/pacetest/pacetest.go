// Package pacetest is the conformance suite every pacer of package pace
// runs: what the worker relies on, whatever keeps the leak's state — the
// process's memory, Redis, a JetStream key-value entry, or one of them
// wrapped by another pacer.
//
// # Use
//
// A pacer's test calls Exercise with a Factory that makes n pacers of one
// new queue sharing one leak state, as n worker processes would:
//
//	func TestKVPacerConforms(t *testing.T) {
//		pacetest.Exercise(t, func(t *testing.T, n int, rate bucket.Rate) []pace.RatePacer {
//			... n pacers over one key-value bucket ...
//		})
//	}
//
// # What it asserts
//
// The first booking of an idle queue starts at once; n pacers shared by
// concurrent callers space their starts at the one leak rate, neither
// faster nor much slower (the starts are measured on the real clock, so
// the bounds allow for the calls' own latency); SetRate takes effect at
// the next booking; and a rate that cannot be used is refused without
// breaking the pacer.
package pacetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// Factory makes n pacers of one queue, new to them, that share one leak
// state at rate. It may start servers; it cleans up with t.Cleanup.
type Factory func(t *testing.T, n int, rate bucket.Rate) []pace.RatePacer

// slack is how late a start may come beyond what the rate allows: a
// booking's round trip on a loaded machine.
const slack = 250 * time.Millisecond

// Exercise runs the suite, each case as a subtest with pacers of its own.
func Exercise(t *testing.T, newPacers Factory) {
	t.Helper()
	t.Run("FirstStartAtOnce", func(t *testing.T) {
		t.Parallel()
		p := newPacers(t, 1, bucket.Rate{Count: 1, Per: time.Second})[0]
		wait, err := p.Reserve(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if wait > 0 {
			t.Fatalf("the first booking of an idle queue waits %v, want 0", wait)
		}
	})
	t.Run("SharedRate", func(t *testing.T) {
		t.Parallel()
		const perPacer, callers = 6, 2
		rate := bucket.Rate{Count: 50, Per: time.Second}
		ps := newPacers(t, 3, rate)
		type start struct{ lo, hi time.Time } // the booked start lies between
		var (
			mu     sync.Mutex
			starts []start
			wg     sync.WaitGroup
		)
		for _, p := range ps {
			for range callers {
				wg.Go(func() {
					for range perPacer / callers {
						before := time.Now()
						wait, err := p.Reserve(t.Context())
						if err != nil {
							t.Error(err)
							return
						}
						after := time.Now()
						mu.Lock()
						starts = append(starts, start{before.Add(wait), after.Add(wait)})
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		n := len(starts)
		first := slices.MinFunc(starts, func(a, b start) int { return a.lo.Compare(b.lo) })
		last := slices.MaxFunc(starts, func(a, b start) int { return a.hi.Compare(b.hi) })
		want := time.Duration(n-1) * rate.Per / time.Duration(rate.Count)
		// Faster than the rate: n starts within less than (n-1)/r.
		if span := last.hi.Sub(first.lo); span < want {
			t.Fatalf("%d bookings from %d pacers start within %v, want at least %v (%v)", n, len(ps), span, want, rate)
		}
		// Much slower than the rate.
		if span := last.lo.Sub(first.hi); span > want+slack {
			t.Fatalf("%d bookings from %d pacers start over %v, want about %v (%v)", n, len(ps), span, want, rate)
		}
	})
	t.Run("SetRateAtNextBooking", func(t *testing.T) {
		t.Parallel()
		slow := bucket.Rate{Count: 2, Per: time.Second} // 500ms apart
		p := newPacers(t, 1, slow)[0]
		if _, err := p.Reserve(t.Context()); err != nil {
			t.Fatal(err)
		}
		fast := bucket.Rate{Count: 100, Per: time.Second}
		if err := p.SetRate(fast); err != nil {
			t.Fatal(err)
		}
		wait, err := p.Reserve(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if wait > 250*time.Millisecond {
			t.Fatalf("the booking after SetRate(%v) waits %v: the old rate's 500ms still holds", fast, wait)
		}
	})
	t.Run("RefusesAnUnusableRate", func(t *testing.T) {
		t.Parallel()
		p := newPacers(t, 1, bucket.Rate{Count: 10, Per: time.Second})[0]
		if err := p.SetRate(bucket.Rate{}); err == nil {
			t.Fatal("SetRate of a zero rate: nil error")
		}
		if _, err := p.Reserve(t.Context()); err != nil {
			t.Fatalf("Reserve after a refused rate: %v", err)
		}
	})
}
