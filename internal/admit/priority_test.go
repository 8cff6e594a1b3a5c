package admit_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// priorityConfig: per X-Client, a key's first job is admitted, its second
// queued a minute out. tenant-a weighs 2, the other tenant-* keys 3.
const priorityConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, delay: 0}
    backlog:
      capacity: 10
      leak_rate: 1/m
      fairness: {weights: {"tenant-*": 3, "tenant-a": 2}, min_share: 10%}
`

// storedHeader is the last message stored under key's subject in q's
// stream d, as JetStream holds it: its raw headers, not ParseJob's reading.
func storedHeader(t *testing.T, b *testBundle, q string, d queue.Destination, key string) nats.Header {
	t.Helper()
	m, err := admittest.LastOfKey(t, b.JS, q, d, key)
	if err != nil {
		t.Fatalf("no job of key %s in the %s stream: %v", key, d, err)
	}
	return m.Header
}

// TestSubmitCarriesPriorityAndWeight: the admitted and the queued job
// carry the submission's class and the key's weight from the queue's
// fairness rules; neither changes the verdicts.
func TestSubmitCarriesPriorityAndWeight(t *testing.T) {
	t.Parallel()
	a, b := setup(t, priorityConfig, setupOptions{})
	for _, c := range []struct {
		key          string
		prio         spillway.Priority
		status       spillway.Status
		dest         queue.Destination
		wantPriority string // the header; "" absent (normal)
		wantWeight   string // the header; "" absent (1)
	}{
		{"tenant-a", spillway.High, spillway.Admitted, queue.Ready, "high", "2"},
		{"tenant-a", spillway.Low, spillway.Queued, queue.Backlog, "low", "2"},
		{"tenant-b", spillway.Normal, spillway.Admitted, queue.Ready, "", "3"},
		{"tenant-b", spillway.High, spillway.Queued, queue.Backlog, "high", "3"},
		{"other", spillway.Low, spillway.Admitted, queue.Ready, "low", ""},
		{"other", spillway.Normal, spillway.Queued, queue.Backlog, "", ""},
	} {
		r := request("q", c.key)
		r.Priority = c.prio
		ans := submit(t, a, r)
		if ans.Reply.Status != c.status {
			t.Fatalf("key %s, priority %s: %+v, want %s", c.key, c.prio, ans.Reply, c.status)
		}
		h := storedHeader(t, b, "q", c.dest, c.key)
		if got := h.Get(spillway.HeaderPriority); got != c.wantPriority {
			t.Errorf("key %s, %s job: %s %q, want %q", c.key, c.status, spillway.HeaderPriority, got, c.wantPriority)
		}
		if got := h.Get(queue.HeaderWeight); got != c.wantWeight {
			t.Errorf("key %s, %s job: %s %q, want %q", c.key, c.status, queue.HeaderWeight, got, c.wantWeight)
		}
		j, err := queue.ParseJob(h, nil)
		if err != nil || j.ID != ans.Reply.ID || j.Priority != c.prio {
			t.Errorf("key %s: the stored job reads as %+v, %v; want id %s, priority %s", c.key, j, err, ans.Reply.ID, c.prio)
		}
	}
}

// TestSubmitWeightAfterReload: a reload's weights apply to the jobs
// submitted after it.
func TestSubmitWeightAfterReload(t *testing.T) {
	t.Parallel()
	a, b := setup(t, priorityConfig, setupOptions{})
	submit(t, a, request("q", "tenant-a"))
	if got := storedHeader(t, b, "q", queue.Ready, "tenant-a").Get(queue.HeaderWeight); got != "2" {
		t.Fatalf("before the reload: weight %q, want 2", got)
	}
	a.SetConfig(admittest.LoadConfig(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, delay: 0}
    backlog: {capacity: 10, leak_rate: 1/m, fairness: {weights: {"tenant-a": 7}}}
`))
	if ans := submit(t, a, request("q", "tenant-a")); ans.Reply.Status != spillway.Queued {
		t.Fatalf("after the reload: %+v, want queued", ans.Reply)
	}
	if got := storedHeader(t, b, "q", queue.Backlog, "tenant-a").Get(queue.HeaderWeight); got != "7" {
		t.Errorf("after the reload: weight %q, want 7", got)
	}
}

// TestSubmitPriorityIdempotent: the priority is part of the job an
// idempotency key names: a replay with the same priority is the first
// answer, one with another priority is another job (idempotency-mismatch),
// and neither stores anything.
func TestSubmitPriorityIdempotent(t *testing.T) {
	t.Parallel()
	a, b := setup(t, priorityConfig, setupOptions{})
	r := request("q", "tenant-a")
	r.IdempotencyKey, r.Priority = "once", spillway.High
	first := submit(t, a, r)
	r1 := request("q", "tenant-a")
	r1.IdempotencyKey, r1.Priority = "once", spillway.High
	if again := submit(t, a, r1); !again.Reply.Duplicate || again.Reply.ID != first.Reply.ID || again.Reply.Status != first.Reply.Status {
		t.Errorf("the replay: %+v, want the first answer %+v as a duplicate", again.Reply, first.Reply)
	}
	r2 := request("q", "tenant-a")
	r2.IdempotencyKey, r2.Priority = "once", spillway.Low
	var e *admit.Error
	if _, err := a.Submit(t.Context(), r2); !errors.As(err, &e) || e.Type != spillway.ProblemIdempotencyMismatch {
		t.Errorf("the key with another priority: %v, want idempotency-mismatch", err)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 1 {
		t.Errorf("%d jobs stored, want 1", n)
	}
	if got := storedHeader(t, b, "q", queue.Ready, "tenant-a").Get(spillway.HeaderPriority); got != "high" {
		t.Errorf("the stored job's priority %q, want the first submission's high", got)
	}
}
