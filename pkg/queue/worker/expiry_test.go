package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A job's expiry travels in Spillway-Expires-At and reads back; a
// malformed one names the header.
func TestJobExpiresAtHeader(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 12, 0, 5, 123, time.UTC)
	h := nats.Header{}
	h.Set(spillway.HeaderJobID, "id")
	h.Set(spillway.HeaderQueue, "q")
	h.Set(spillway.HeaderCost, "1")
	h.Set(spillway.HeaderAttempt, "0")
	h.Set(queue.HeaderEnqueuedAt, at.Add(-time.Second).Format(time.RFC3339Nano))
	h.Set(queue.HeaderExpiresAt, at.Format(time.RFC3339Nano))
	j, err := queue.ParseJob(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !j.ExpiresAt.Equal(at) {
		t.Errorf("ExpiresAt %v, want %v", j.ExpiresAt, at)
	}
	if _, ok := j.Header[queue.HeaderExpiresAt]; ok {
		t.Errorf("the expiry is kept among the job's other headers too: %v", j.Header)
	}
	h.Set(queue.HeaderExpiresAt, "tomorrow")
	if _, err := queue.ParseJob(h, nil); err == nil || !strings.Contains(err.Error(), queue.HeaderExpiresAt) {
		t.Errorf("a malformed expiry: %v, want an error naming %s", err, queue.HeaderExpiresAt)
	}
}

// A backlog job that cannot be released before its expiry never runs:
// behind a leak of one start a minute, a job that expires in 2 s after
// another took the minute's start is dead-lettered with reason expired,
// at once (its booked start is past its expiry), and a job that expired
// before the drain read it goes the same way. Neither takes a start.
func TestBacklogExpiredJobsNeverRun(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("expiry")
	cfg.LeakRate = bucket.Rate{Count: 1, Per: time.Minute}
	ctx, b := queuetest.StartQueue(t, cfg)
	first := publishBacklog(t, ctx, b, "a", 1, time.Time{})[0]
	gone := queuetest.NewJob(t, "expiry", "c")
	gone.ExpiresAt = time.Now().Add(-time.Second)
	if _, err := b.Pub.Publish(ctx, queue.Backlog, gone); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "the first job's success", func() bool { return rec.count(worker.Succeeded) == 1 })
	late := queuetest.NewJob(t, "expiry", "b")
	late.ExpiresAt = time.Now().Add(2 * time.Second)
	if _, err := b.Pub.Publish(ctx, queue.Backlog, late); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 20*time.Second, "2 dead letters", func() bool { return rec.count(worker.DeadLettered) == 2 })
	rec.mu.Lock()
	for _, j := range []*queue.Job{gone, late} {
		if _, ran := rec.starts[j.ID]; ran {
			t.Errorf("expired job %s ran", j.ID)
		}
	}
	if _, ran := rec.starts[first.ID]; !ran {
		t.Error("the first job did not run")
	}
	for _, e := range rec.events {
		if e.Kind == worker.DeadLettered && e.Reason != queue.ReasonExpired {
			t.Errorf("job %s dead with reason %q, want %q", e.Job.ID, e.Reason, queue.ReasonExpired)
		}
	}
	rec.mu.Unlock()
	dead := deadLetters(t, ctx, b.JS, "expiry")
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	for _, m := range dead {
		if r := m.Header.Get(queue.HeaderDeadReason); r != queue.ReasonExpired {
			t.Errorf("dead letter %s: reason %q, want %q", m.Header.Get(spillway.HeaderJobID), r, queue.ReasonExpired)
		}
		if !strings.Contains(m.Header.Get(queue.HeaderLastError), "expires at") {
			t.Errorf("dead letter %s: last error %q, want when it expired", m.Header.Get(spillway.HeaderJobID), m.Header.Get(queue.HeaderLastError))
		}
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("expiry", queue.Backlog)); n != 0 {
		t.Errorf("backlog holds %d jobs", n)
	}
}

// A worker whose grant's start comes after the job's expiry — granted in
// time, started late — dead-letters the job with reason expired rather
// than run it. The grant is published before the worker starts, as a
// leader that died after granting would leave it: the next leader skips
// the granted job, so the worker alone decides.
func TestGrantedJobStartingAfterItsExpiryIsNotRun(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("lategrant"))
	j := queuetest.NewJob(t, "lategrant", "a")
	j.ExpiresAt = time.Now().Add(time.Second)
	ack, err := b.Pub.Publish(ctx, queue.Backlog, j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.JS.PublishMsg(ctx, worker.GrantMsg("lategrant", ack.Sequence, j.ExpiresAt.Add(500*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "a dead letter", func() bool { return rec.count(worker.DeadLettered) == 1 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if _, ran := rec.starts[j.ID]; ran {
		t.Error("the job ran after its expiry")
	}
	for _, e := range rec.events {
		if e.Kind == worker.DeadLettered && (e.Reason != queue.ReasonExpired || e.Job == nil || e.Job.ID != j.ID) {
			t.Errorf("dead letter %+v, want job %s with reason %s", e, j.ID, queue.ReasonExpired)
		}
	}
}
