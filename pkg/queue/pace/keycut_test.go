package pace_test

import (
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// A key's pushback cuts an adaptive leak as a queue's does, to 7/10, but
// does not pause it; pushbacks within a second of the cut do not cut it
// again; a fixed leak is left alone.
func TestCutSlowsAnAdaptiveLeakWithoutPausing(t *testing.T) {
	t.Parallel()
	for _, adaptive := range []bool{true, false} {
		mem, err := bucket.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		sp, err := pace.NewPacer(mem, "hooks", per100)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pace.NewYieldingPacer(sp, nil, "hooks", per100, adaptive)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_700_000_000, 0)
		pace.SetYieldingPacerClock(p, func() time.Time { return now })
		if err := p.Cut(t.Context()); err != nil {
			t.Fatal(err)
		}
		rate, paused := p.Current()
		want := int64(70_000)
		if !adaptive {
			want = 100_000
		}
		if rate != want || paused.After(now) {
			t.Errorf("adaptive %v: after a key's pushback the rate is %d/1000 s, paused until %v; want %d and no pause", adaptive, rate, paused, want)
		}
		now = now.Add(500 * time.Millisecond)
		if err := p.Cut(t.Context()); err != nil {
			t.Fatal(err)
		}
		if again, _ := p.Current(); adaptive && again < 60_000 {
			t.Errorf("a second pushback 500ms after the cut cut again: %d/1000 s", again)
		}
	}
}
