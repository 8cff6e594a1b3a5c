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

// The weight in force when a flow is picked counts, not the one stamped
// on its jobs: a change reaches the jobs already waiting, from the next
// start on (the finish tags so far stand).
func TestFairSchedWeighsByTheWeightsInForce(t *testing.T) {
	s := newFairSched(0)
	weight := map[string]int{"a": 1, "b": 1}
	s.weightOf = func(key string) (int, bool) { return weight[key], true }
	a, b := "spillway.backlog.q.a", "spillway.backlog.q.b"
	seq := uint64(0)
	for range 200 {
		for _, sub := range []string{a, b} {
			seq++
			key := sub[len(sub)-1:]
			s.push(s.flow(sub), pendingJob{seq: seq, weight: 1, key: key}, 0)
		}
	}
	count := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			f, _, ok := s.pick(0)
			if !ok {
				t.Fatal("nothing due")
			}
			got[f.key]++
		}
		return got
	}
	if got := count(40); got["a"] != 20 || got["b"] != 20 {
		t.Errorf("weights 1/1: %v, want 20/20", got)
	}
	weight["a"] = 3
	if got := count(80); got["a"] < 59 || got["a"] > 61 {
		t.Errorf("weights 3/1 after the change: %v of 80, want a 60 ±1", got)
	}
}
