package admit_test

import (
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// With READY at its capacity (no worker takes jobs), a job the tiers admit
// is queued in the backlog with a position and an estimated start, its
// units still taken; once the backlog is full too, it is refused with
// queue-full and its units given back. Nothing is dropped: every accepted
// job is in READY or the backlog.
func TestReadyFullQueuesAdmittedJobs(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 10}
    backlog: {capacity: 2, leak_rate: 1/s}
    ready: {capacity: 2}
`, setupOptions{})
	var st []spillway.Status
	for i := range 5 {
		ans := submit(t, a, request("q", "c"))
		st = append(st, ans.Reply.Status)
		switch i {
		case 2, 3:
			if ans.Reply.Status != spillway.Queued || !ans.ReadyFull || ans.Reply.Position < 1 || ans.Reply.EstimatedStart == nil || ans.Reply.ID == "" {
				t.Errorf("job %d, READY full: %+v (ready full %t), want queued with an id, a position and an estimated start", i+1, ans.Reply, ans.ReadyFull)
			}
			if ans.Decision.Remaining != int64(9-i) {
				t.Errorf("job %d: %d tokens left, want %d (a queued job keeps its units)", i+1, ans.Decision.Remaining, 9-i)
			}
		case 4:
			if ans.Reply.Status != spillway.Rejected || ans.Reply.Type != spillway.ProblemQueueFull || ans.Refunded != 1 || ans.Reply.RetryAfterMS <= 0 {
				t.Errorf("job 5, READY and backlog full: %+v (refunded %d), want rejected %s, 1 unit refunded, a retry_after_ms", ans.Reply, ans.Refunded, spillway.ProblemQueueFull)
			}
		}
	}
	if want := []spillway.Status{spillway.Admitted, spillway.Admitted, spillway.Queued, spillway.Queued, spillway.Rejected}; !slicesEqual(st, want) {
		t.Errorf("statuses %v, want %v", st, want)
	}
	if n, m := b.msgs(t, "q", queue.Ready), b.msgs(t, "q", queue.Backlog); n != 2 || m != 2 {
		t.Errorf("READY holds %d jobs, the backlog %d; want 2 and 2", n, m)
	}
	// The refund: the next job takes the token job 5 gave back.
	if ans := submit(t, a, request("q", "c")); ans.Decision.Remaining != 5 {
		t.Errorf("after the refund: %d tokens left, want 5 (6 after the refund, less its own)", ans.Decision.Remaining)
	}
	wantSamples(t, b.reg, "spillway_decisions_total", map[string]float64{
		"queue=q,reason=limit,verdict=admitted":        2,
		"queue=q,reason=ready_full,verdict=queued":     2,
		"queue=q,reason=backlog_full,verdict=rejected": 2,
	})
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
