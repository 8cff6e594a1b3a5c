package worker

import (
	"math"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// A flow whose first due job's concurrency key is at its max is not
// picked: the other flows take every start meanwhile (work-conserving),
// and once a slot frees (recheck) it goes again. A job of the flow that
// is past its expiry wakes it to be dead-lettered, without a slot.
func TestFairSchedHoldsAKeyAtItsMax(t *testing.T) {
	s := newFairSched(0)
	a, b := "spillway.backlog.q.a", "spillway.backlog.q.b"
	bound := []queue.ConcurrencyKey{{Name: "one", Max: 1, Token: "a"}}
	full := true
	s.atMax = func(keys []queue.ConcurrencyKey, now int64) (string, int64) {
		if full && len(keys) == 1 && keys[0] == bound[0] {
			return "q.one.a", math.MaxInt64
		}
		return "", 0
	}
	for i := range 4 {
		s.add(a, pendingJob{seq: uint64(2*i + 1), conc: bound, id: "a"}, 0)
		s.add(b, pendingJob{seq: uint64(2*i + 2)}, 0)
	}
	for i := range 4 {
		f, _, ok := s.pick(10)
		if !ok || f.subject != b {
			t.Fatalf("pick %d while a is at its max: %v %v, want %s", i, f, ok, b)
		}
	}
	if _, _, ok := s.pick(20); ok {
		t.Fatal("a job of a key at its max was picked")
	}
	if at, ok := s.nextDue(); !ok || at != math.MaxInt64 {
		t.Fatalf("next due %d %v: a held key waits for a change of its slots", at, ok)
	}
	s.recheck("q.one.a", 30) // its slots changed, but it is still at its max
	if _, _, ok := s.pick(30); ok {
		t.Fatal("a job of a key at its max was picked after a recheck")
	}
	full = false
	s.recheck("q.one.a", 40)
	if f, j, ok := s.pick(40); !ok || f.subject != a || j.seq != 1 {
		t.Fatalf("after a slot freed: %v %+v %v, want a's first job", f, j, ok)
	}
	if len(s.capped) != 0 {
		t.Errorf("%d entries still hold flows", len(s.capped))
	}

	full = true
	s.add(a, pendingJob{seq: 100, conc: bound, id: "x"}, 40) // behind the others
	s.putBack(a, pendingJob{seq: 2, conc: bound, id: "e", expires: 50}, 40)
	if at, ok := s.nextDue(); !ok || at != 50 {
		t.Fatalf("next due %d %v, want the held job's expiry 50", at, ok)
	}
	if f, j, ok := s.pick(50); !ok || f.subject != a || j.seq != 2 || !j.expired(50) {
		t.Fatalf("at its expiry: %v %+v %v, want the expired job, to be dead-lettered", f, j, ok)
	}
}

// The leader's count of a key's holders: the watch's holders while their
// entry changed within a lease, plus the jobs granted whose holder the
// watch does not show yet, until grantShows after their start.
func TestKeyCapsCountsHoldersAndGrants(t *testing.T) {
	c := newKeyCaps("q", 3*time.Second)
	two := []queue.ConcurrencyKey{{Name: "n", Max: 2, Token: "k"}}
	start := time.Unix(100, 0)
	now := start.UnixNano()
	if ek, _ := c.atMax(two, now); ek != "" {
		t.Fatalf("no holder and no grant: at its max (%s)", ek)
	}
	c.grant(pendingJob{conc: two, id: "j1"}, start)
	if ek, _ := c.atMax(two, now); ek != "" {
		t.Fatalf("one grant of max 2: at its max (%s)", ek)
	}
	c.grant(pendingJob{conc: two, id: "j2"}, start)
	ek, until := c.atMax(two, now)
	if ek != "q.n.k" || until != start.Add(grantShows).UnixNano() {
		t.Fatalf("two grants of max 2: %q until %d, want q.n.k until the grants stop counting", ek, until)
	}
	if ek, _ := c.atMax(two, until); ek != "" {
		t.Fatalf("grants past grantShows still count (%s)", ek)
	}
	if len(c.granted) != 0 {
		t.Errorf("grants that stopped counting are kept: %v", c.granted)
	}
}
