package worker

import "testing"

// A job whose expiry comes before it is due leaves its flow at its expiry
// (the leader dead-letters it, taking no start): the waiting flow wakes
// then, and the pick is that job, ahead of its flow's earlier job that is
// still not due.
func TestFairSchedExpiryWakesAWaitingFlow(t *testing.T) {
	t.Parallel()
	s := newFairSched(0)
	s.add("spillway.backlog.q.a", pendingJob{seq: 1, due: 100, weight: 1}, 0)
	s.add("spillway.backlog.q.a", pendingJob{seq: 2, due: 200, expires: 50, weight: 1}, 0)
	if at, ok := s.nextDue(); !ok || at != 50 {
		t.Fatalf("next due %d (%t), want 50: the second job's expiry", at, ok)
	}
	if s.peek(49) {
		t.Fatal("a job goes before any is due or expired")
	}
	_, j, ok := s.pick(50)
	if !ok || j.seq != 2 || !j.expired(50) {
		t.Fatalf("pick at 50: %+v (%t), want job 2, expired", j, ok)
	}
	if _, j, ok = s.pick(100); !ok || j.seq != 1 || j.expired(100) {
		t.Errorf("pick at 100: %+v (%t), want job 1, due", j, ok)
	}
}

// A job that leaves without a start (expired, or not a job) takes no turn
// of its flow either: a key whose first jobs expired is next with its
// first live one, as if they had never been there.
func TestFairSchedExpiredJobsTakeNoTurn(t *testing.T) {
	t.Parallel()
	s := newFairSched(0)
	a, b := "spillway.backlog.q.a", "spillway.backlog.q.b"
	s.add(a, pendingJob{seq: 1, due: 0, expires: 5, weight: 1}, 0)
	s.add(a, pendingJob{seq: 2, due: 0, expires: 5, weight: 1}, 0)
	s.add(a, pendingJob{seq: 3, due: 0, weight: 1}, 0)
	s.add(a, pendingJob{seq: 4, due: 0, weight: 1}, 0)
	s.add(b, pendingJob{seq: 5, due: 0, weight: 1}, 0)
	s.add(b, pendingJob{seq: 6, due: 0, weight: 1}, 0)
	got := pickAll(s, 10)
	want := []uint64{1, 2, 3, 5, 4, 6}
	if len(got) != len(want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picks %v, want %v", got, want)
		}
	}
}
