package worker

import "testing"

// A held key's flows are not picked until the hold ends; the other keys
// take every start meanwhile (work-conserving), and the held key is due
// again at the hold's end, after the flows that stayed due.
func TestFairSchedHoldsAPausedKey(t *testing.T) {
	s := newFairSched(0)
	p, q := "spillway.backlog.q.ppppppppppppppppppppppppp1", "spillway.backlog.q.qqqqqqqqqqqqqqqqqqqqqqqqq1"
	fill(s, 0, 4, []string{p, q}, nil)
	s.hold("ppppppppppppppppppppppppp1", 100, 0)
	for i := range 4 {
		f, _, ok := s.pick(10)
		if !ok || f.subject != q {
			t.Fatalf("pick %d during the hold: %v %v, want %s", i, f, ok, q)
		}
	}
	if _, _, ok := s.pick(50); ok {
		t.Fatal("a job was picked while the only key with jobs is held")
	}
	if at, ok := s.nextDue(); !ok || at != 100 {
		t.Fatalf("next due %d %v, want the hold's end 100", at, ok)
	}
	for i := range 4 {
		f, _, ok := s.pick(100)
		if !ok || f.subject != p {
			t.Fatalf("pick %d after the hold: %v %v, want %s", i, f, ok, p)
		}
	}
}

// A flow made while its key is held (its jobs arrive during the pause)
// waits for the hold's end too; a shorter hold does not shorten it.
func TestFairSchedNewFlowOfAHeldKey(t *testing.T) {
	s := newFairSched(0)
	s.heldUntil = func(token string) int64 {
		if token == "held" {
			return 100
		}
		return 0
	}
	s.add("spillway.backlog.q.held", pendingJob{seq: 1}, 0)
	s.hold("held", 50, 0)
	if _, _, ok := s.pick(60); ok {
		t.Fatal("a job of a held key was picked before its hold's end")
	}
	if f, _, ok := s.pick(100); !ok || f.subject != "spillway.backlog.q.held" {
		t.Fatalf("at the hold's end: %v %v, want the held key's job", f, ok)
	}
	if len(s.keyFlows) != 0 || len(s.flows) != 0 {
		t.Errorf("flows left after the last job: %d, by key %d", len(s.flows), len(s.keyFlows))
	}
}
