package queue

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
