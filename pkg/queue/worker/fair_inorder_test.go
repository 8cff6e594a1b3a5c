package worker

import (
	"fmt"
	"testing"
)

// Jobs read in stream order fill a flow's window past flowWindow, up to
// flowLookahead and within the look-ahead budget over all flows; the rest
// stay in the stream for a read by subject.
func TestFairSchedInOrderReadsFillTheLookahead(t *testing.T) {
	s := newFairSched(0)
	a := "spillway.backlog.q.a"
	for seq := uint64(1); seq <= flowLookahead+1; seq++ {
		s.add(a, pendingJob{seq: seq, weight: 1}, 0)
	}
	f := s.flows[a]
	if len(f.window) != flowLookahead || !f.more || f.last != flowLookahead {
		t.Fatalf("flow a: %d jobs held, more %v, last %d; want %d, true, %d", len(f.window), f.more, f.last, flowLookahead, flowLookahead)
	}
	if s.beyond != flowLookahead-flowWindow {
		t.Fatalf("%d jobs held past the window; want %d", s.beyond, flowLookahead-flowWindow)
	}
	// Behind a job left in the stream, a later one is left too, even with
	// room: the window holds the flow's first jobs, in order.
	s.pick(0)
	s.add(a, pendingJob{seq: 10_000, weight: 1}, 0)
	if n := len(f.window); n != flowLookahead-1 || f.last != flowLookahead {
		t.Fatalf("flow a after a pick and a later job: %d held, last %d; want %d, %d", n, f.last, flowLookahead-1, flowLookahead)
	}

	// Once the budget is spent, a flow holds flowWindow jobs read in order.
	seq := uint64(20_000)
	for i := 0; s.beyond < maxLookahead; i++ {
		sub := fmt.Sprintf("spillway.backlog.q.f%d", i)
		for range flowLookahead {
			seq++
			s.add(sub, pendingJob{seq: seq, weight: 1}, 0)
		}
	}
	z := "spillway.backlog.q.z"
	for range flowWindow + 1 {
		seq++
		s.add(z, pendingJob{seq: seq, weight: 1}, 0)
	}
	if fz := s.flows[z]; len(fz.window) != flowWindow || !fz.more {
		t.Fatalf("flow z with the budget spent: %d jobs held, more %v; want %d, true", len(fz.window), fz.more, flowWindow)
	}
}
