package pace_test

import (
	"testing"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/pace/pacetest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Every pacer runs the one conformance suite, n pacers sharing one leak
// state as n worker processes would.

func TestStorePacerConforms(t *testing.T) {
	t.Parallel()
	pacetest.Exercise(t, storePacers)
}

func TestKVPacerConforms(t *testing.T) {
	t.Parallel()
	pacetest.Exercise(t, func(t *testing.T, n int, rate bucket.Rate) []pace.RatePacer {
		var ps []pace.RatePacer
		for _, p := range kvPacers(t, queuetest.Start(t), n, rate, nil) {
			ps = append(ps, p)
		}
		return ps
	})
}

func TestFailoverPacerConforms(t *testing.T) {
	t.Parallel()
	pacetest.Exercise(t, func(t *testing.T, n int, rate bucket.Rate) []pace.RatePacer {
		primary := storePacers(t, n, rate)
		fallback := kvPacers(t, queuetest.Start(t), n, rate, nil)
		var ps []pace.RatePacer
		for i := range n {
			fp, err := pace.NewFailoverPacer(primary[i].(*pace.StorePacer), fallback[i])
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, fp)
		}
		return ps
	})
}

func TestYieldingPacerConforms(t *testing.T) {
	t.Parallel()
	pacetest.Exercise(t, func(t *testing.T, n int, rate bucket.Rate) []pace.RatePacer {
		var ps []pace.RatePacer
		for _, p := range yieldingPacers(t, queuetest.Start(t), n, rate, false) {
			ps = append(ps, p)
		}
		return ps
	})
}

// storePacers returns n StorePacers of one queue over one memory store.
func storePacers(t *testing.T, n int, rate bucket.Rate) []pace.RatePacer {
	t.Helper()
	store, err := bucket.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	var ps []pace.RatePacer
	for range n {
		p, err := pace.NewPacer(store, "email", rate)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}
