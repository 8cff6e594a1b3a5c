package worker

import (
	"fmt"
	"math"
	"testing"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// fill gives each subject n due jobs, in one stream, round robin.
func fill(s *fairSched, now int64, n int, subjects []string, weight map[string]int) {
	seq := uint64(0)
	for range n {
		for _, sub := range subjects {
			seq++
			s.add(sub, pendingJob{seq: seq, due: now, weight: max(weight[sub], 1)}, now)
		}
	}
}

// drainSched picks n jobs, reading more from the fake stream as a leader
// would (every job of the flow is due; the stream holds them in order).
type fakeStream map[string][]pendingJob

func (fs fakeStream) read(s *fairSched, now int64) {
	for f := range s.reads {
		jobs := fs[f.subject]
		put := false
		for _, j := range jobs {
			if j.seq > f.last && len(f.window) < flowWindow {
				f.window = append(f.window, j)
				f.last = j.seq
				put = true
			}
		}
		if !put {
			s.exhausted(f, now)
		} else {
			s.place(f, now)
		}
	}
}

func TestFairSchedSharesByWeight(t *testing.T) {
	s := newFairSched(0)
	fs := fakeStream{}
	subs := []string{"spillway.backlog.q.a", "spillway.backlog.q.b", "spillway.backlog.q.c"}
	weight := map[string]int{subs[2]: 2}
	seq := uint64(0)
	for range 1000 {
		for _, sub := range subs {
			seq++
			fs[sub] = append(fs[sub], pendingJob{seq: seq, weight: max(weight[sub], 1)})
		}
	}
	for _, sub := range subs {
		s.flow(sub).more = true
		s.place(s.flow(sub), 0)
	}
	got := map[string]int{}
	last := map[string]uint64{}
	for i := range 400 {
		fs.read(s, 0)
		f, j, ok := s.pick(0)
		if !ok {
			t.Fatalf("pick %d: nothing due", i)
		}
		if j.seq <= last[f.subject] {
			t.Fatalf("flow %s: job %d after %d: not FIFO", f.subject, j.seq, last[f.subject])
		}
		last[f.subject] = j.seq
		got[f.subject]++
	}
	want := map[string]int{subs[0]: 100, subs[1]: 100, subs[2]: 200}
	for sub, n := range want {
		if math.Abs(float64(got[sub]-n)) > 1 {
			t.Errorf("%s: %d starts of 400, want %d ±1 (weights 1,1,2)", sub, got[sub], n)
		}
	}
}

func TestFairSchedNewKeyGoesNext(t *testing.T) {
	s := newFairSched(0)
	subs := []string{"spillway.backlog.q.a", "spillway.backlog.q.b", "spillway.backlog.q.c"}
	fill(s, 0, 8, subs, nil)
	for range 5 {
		s.pick(0)
	}
	s.add("spillway.backlog.q.lone", pendingJob{seq: 1000, due: 0, weight: 1}, 0)
	for i := range len(subs) + 1 {
		f, _, _ := s.pick(0)
		if f.subject == "spillway.backlog.q.lone" {
			t.Logf("the new key's job went after %d others", i)
			return
		}
	}
	t.Fatalf("the new key's job did not go within %d starts", len(subs)+1)
}

func TestFairSchedNotDueHoldsBackNobody(t *testing.T) {
	s := newFairSched(0)
	sub := "spillway.backlog.q.a"
	s.add(sub, pendingJob{seq: 1, due: 100, weight: 1}, 0)
	s.add(sub, pendingJob{seq: 2, due: 0, weight: 1}, 0)
	s.add(sub, pendingJob{seq: 3, due: 0, weight: 1}, 0)
	var order []uint64
	for now := int64(0); len(order) < 3 && now <= 100; now += 50 {
		for {
			_, j, ok := s.pick(now)
			if !ok {
				break
			}
			order = append(order, j.seq)
		}
	}
	if fmt.Sprint(order) != "[2 3 1]" {
		t.Fatalf("order %v, want [2 3 1]: due jobs pass one not due, FIFO among the due", order)
	}
	if at, ok := s.nextDue(); ok {
		t.Fatalf("a drained flow still waits, due at %d", at)
	}
}

func TestFairSchedPriorityAndMinShare(t *testing.T) {
	for _, tc := range []struct {
		minShare float64
		wantLow  int // of 100 starts
	}{{0, 0}, {0.1, 10}} {
		s := newFairSched(tc.minShare)
		fill(s, 0, 8, []string{"spillway.backlog.q.a", "spillway.backlog.q.low.b"}, nil)
		fs := fakeStream{}
		for i := range 200 {
			fs["spillway.backlog.q.a"] = append(fs["spillway.backlog.q.a"], pendingJob{seq: uint64(1000 + 2*i), weight: 1})
			fs["spillway.backlog.q.low.b"] = append(fs["spillway.backlog.q.low.b"], pendingJob{seq: uint64(1001 + 2*i), weight: 1})
		}
		for _, f := range s.flows {
			f.more = true
			s.place(f, 0)
		}
		low := 0
		for range 100 {
			fs.read(s, 0)
			f, _, _ := s.pick(0)
			if f.class == spillway.Low {
				low++
			}
		}
		if low != tc.wantLow {
			t.Errorf("min_share %v: low got %d of 100 starts, want %d", tc.minShare, low, tc.wantLow)
		}
	}
	// A high job goes before every normal one due with it.
	s := newFairSched(0)
	fill(s, 0, 5, []string{"spillway.backlog.q.a"}, nil)
	s.add("spillway.backlog.q.high.a", pendingJob{seq: 100, weight: 1}, 0)
	if f, _, _ := s.pick(0); f.class != spillway.High {
		t.Fatalf("first start went to class %v, want high", f.class)
	}
}

// A waiting flow reads ahead up to flowLookahead jobs, so a due job that
// deep goes next; the jobs held past flowWindow are counted, and the count
// goes back to 0 as they go.
func TestFairSchedLookahead(t *testing.T) {
	s := newFairSched(0)
	sub := "spillway.backlog.q.a"
	f := s.flow(sub)
	f.more = true
	const hour = int64(3600e9)
	seq := uint64(0)
	read := func(due int64) bool {
		if !f.mayReadAhead() && len(f.window) > 0 || !s.mayHoldBeyond(f) {
			return false
		}
		seq++
		s.push(f, pendingJob{seq: seq, due: due, weight: 1}, 0)
		return true
	}
	for range 2 * flowLookahead {
		if !read(hour) {
			break
		}
	}
	if len(f.window) != flowLookahead || s.beyond != flowLookahead-flowWindow {
		t.Fatalf("read ahead to %d jobs, %d held past the window; want %d and %d", len(f.window), s.beyond, flowLookahead, flowLookahead-flowWindow)
	}
	// The last of the window becomes due: it goes at once.
	f.window[len(f.window)-1].due = 0
	s.place(f, 0)
	if _, j, ok := s.pick(0); !ok || j.seq != seq {
		t.Fatalf("picked %d (%v), want the due job %d behind %d waiting", j.seq, ok, seq, flowLookahead-1)
	}
	for n := 0; ; n++ {
		if _, _, ok := s.pick(hour); !ok {
			if n != flowLookahead-1 {
				t.Fatalf("%d jobs went after the hour, want %d", n, flowLookahead-1)
			}
			break
		}
	}
	if s.beyond != 0 {
		t.Fatalf("%d jobs counted past the window after every job went, want 0", s.beyond)
	}
}

// TestFairSchedReadAheadAtTheBound: once the windows hold maxLookahead
// jobs past their first flowWindow, the read-ahead walks only the flows
// that may still read — those holding fewer than flowWindow — and not the
// waiting flows with full windows, which can be as many as a backlog's
// depth ÷ flowWindow; once jobs go and the bound is left, those read again.
func TestFairSchedReadAheadAtTheBound(t *testing.T) {
	s := newFairSched(0)
	const hour = int64(3600e9)
	seq := uint64(0)
	fillFlow := func(sub string, n int, due int64) *flow {
		f := s.flow(sub)
		f.more = true
		for range n {
			if !s.mayHoldBeyond(f) {
				break
			}
			seq++
			s.push(f, pendingJob{seq: seq, due: due, weight: 1}, 0)
		}
		return f
	}
	// Due jobs past the windows, up to the bound: flows that read nothing
	// ahead, having due jobs.
	for i := 0; s.beyond < maxLookahead; i++ {
		fillFlow(fmt.Sprintf("spillway.backlog.q.due%d", i), flowLookahead, 0)
	}
	const full = 2000
	for i := range full {
		fillFlow(fmt.Sprintf("spillway.backlog.q.full%d", i), flowWindow, hour)
	}
	small := fillFlow("spillway.backlog.q.small", 3, hour)
	walked := func() map[*flow]bool {
		m := make(map[*flow]bool)
		for f := range s.readAhead {
			m[f] = true
		}
		return m
	}
	if got := walked(); len(got) != 1 || !got[small] {
		t.Fatalf("at the bound (%d held past the windows) the read-ahead walked %d flows, want only the one holding 3 jobs", s.beyond, len(got))
	}
	// The due jobs go: the windows hold less than the bound past theirs,
	// and the waiting flows with full windows may read ahead again.
	for s.beyond >= maxLookahead-flowLookahead {
		if _, _, ok := s.pick(0); !ok {
			t.Fatalf("no due job to start with %d held past the windows", s.beyond)
		}
	}
	if got := walked(); len(got) != full+1 || !got[small] {
		t.Fatalf("below the bound (%d held past the windows) the read-ahead walked %d flows, want %d", s.beyond, len(got), full+1)
	}
}

// TestFairSchedAddHoldsPastTheWindow: a flow's deliveries are held past
// flowWindow up to flowLookahead; the next one is left in the stream and
// marks the flow, whose later deliveries are dropped until a read by
// subject reaches the stream's end; then deliveries are held again, and
// one at or before the flow's last is known already.
func TestFairSchedAddHoldsPastTheWindow(t *testing.T) {
	s := newFairSched(0)
	sub := "spillway.backlog.q.a"
	for seq := uint64(1); seq <= flowLookahead+2; seq++ {
		s.add(sub, pendingJob{seq: seq, due: 0, weight: 1}, 0)
	}
	f := s.flows[sub]
	if len(f.window) != flowLookahead || !f.more || f.last != flowLookahead {
		t.Fatalf("window %d jobs, more %v, last %d; want %d, true, %d", len(f.window), f.more, f.last, flowLookahead, flowLookahead)
	}
	for len(f.window) >= flowWindow { // starts until the flow needs a read
		s.pick(0)
	}
	if _, ok := s.reads[f]; !ok {
		t.Fatal("a marked flow with room is not read by subject")
	}
	// The read finds the two jobs the window had no room for, then the end.
	s.push(f, pendingJob{seq: flowLookahead + 1, weight: 1}, 0)
	s.push(f, pendingJob{seq: flowLookahead + 2, weight: 1}, 0)
	s.exhausted(f, 0)
	s.add(sub, pendingJob{seq: flowLookahead + 2, weight: 1}, 0) // delivered again: known
	s.add(sub, pendingJob{seq: flowLookahead + 3, weight: 1}, 0)
	got := pickAll(s, 0)
	want := []uint64{}
	for seq := uint64(flowLookahead - flowWindow + 2); seq <= flowLookahead+3; seq++ {
		want = append(want, seq)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("picked %v, want %v: every job once, in order", got, want)
	}
}

// TestFairSchedAddBound: past flowWindow, windows hold at most
// maxLookahead jobs in all; a flow whose window is full then is marked.
func TestFairSchedAddBound(t *testing.T) {
	s := newFairSched(0)
	flows := maxLookahead/(flowLookahead-flowWindow) + 2
	seq := uint64(0)
	for i := range flows {
		for range flowLookahead {
			seq++
			s.add(fmt.Sprintf("spillway.backlog.q.k%d", i), pendingJob{seq: seq, due: 100, weight: 1}, 0)
		}
	}
	if s.beyond != maxLookahead {
		t.Fatalf("%d jobs held past the windows, want the bound %d", s.beyond, maxLookahead)
	}
	last := s.flows[fmt.Sprintf("spillway.backlog.q.k%d", flows-1)]
	if len(last.window) != flowWindow || !last.more {
		t.Fatalf("a flow delivered past the bound holds %d jobs, more %v; want %d, true", len(last.window), last.more, flowWindow)
	}
}

// TestFairSchedForgetsAfterTheConsumer: a flow read by subject ahead of
// the consumer and drained stays known until the consumer has delivered
// its last job, so that the late delivery of a job already picked is not
// offered again.
func TestFairSchedForgetsAfterTheConsumer(t *testing.T) {
	s := newFairSched(0)
	sub := "spillway.backlog.q.a"
	f := s.flow(sub)
	s.push(f, pendingJob{seq: 10, weight: 1}, 0)
	s.exhausted(f, 0)
	if _, j, _ := s.pick(0); j.seq != 10 {
		t.Fatalf("picked %d, want 10", j.seq)
	}
	s.add("spillway.backlog.q.b", pendingJob{seq: 5, weight: 1}, 0)
	s.add(sub, pendingJob{seq: 10, weight: 1}, 0) // the consumer catches up
	if _, j, ok := s.pick(0); !ok || j.seq != 5 {
		t.Fatalf("picked %d (%v), want 5 alone", j.seq, ok)
	}
	if _, j, ok := s.pick(0); ok {
		t.Fatalf("job %d picked again after its late delivery", j.seq)
	}
	s.add("spillway.backlog.q.b", pendingJob{seq: 11, weight: 1}, 0)
	if s.flows[sub] != nil || len(s.linger) != 0 {
		t.Fatalf("the drained flow is still known after the consumer passed it")
	}
}

// pickAll picks from s at now until nothing goes, and returns the picked
// jobs' sequences in order.
func pickAll(s *fairSched, now int64) []uint64 {
	var got []uint64
	for {
		_, j, ok := s.pick(now)
		if !ok {
			return got
		}
		got = append(got, j.seq)
	}
}
