package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// TestFullReadyDoesNotHoldBackTheBacklog: a backlog job runs from its
// backlog message at its booked start, so a READY that holds its capacity
// (workers far behind, or a job stuck in it) delays no backlog job, and
// the job in READY stays there until it is done.
func TestFullReadyDoesNotHoldBackTheBacklog(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("full")
	cfg.ReadyCapacity = 1
	ctx, b := queuetest.StartQueue(t, cfg)
	// READY's one place is taken by a job whose handler blocks.
	blocker := queuetest.NewJob(t, "full", "a")
	if _, err := b.Pub.Publish(ctx, queue.Ready, blocker); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "full", "a")); !errors.Is(err, queue.ErrReadyFull) {
		t.Fatalf("a second job in a READY of capacity 1: %v, want ErrReadyFull", err)
	}
	var backlog []*queue.Job
	for i := range 20 {
		backlog = append(backlog, publishBacklog(t, ctx, b, fmt.Sprint("key-", i), 1, time.Time{})...)
	}
	rec := newRecorder()
	unblock := make(chan struct{})
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 2, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		if j.ID == blocker.ID {
			select {
			case <-unblock:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	rec.waitFor(t, 20*time.Second, "the blocking job to start", func() bool { return rec.startCount(blocker.ID) == 1 })
	rec.waitFor(t, 60*time.Second, "every backlog job to run while READY is full", func() bool {
		for _, j := range backlog {
			if rec.startCount(j.ID) != 1 {
				return false
			}
		}
		return true
	})
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("full", queue.Ready)); n != 1 {
		t.Fatalf("READY holds %d jobs, want the blocking one", n)
	}
	close(unblock)
	rec.waitFor(t, 20*time.Second, "both streams to empty", func() bool {
		return queuetest.Stored(t, ctx, b.JS, queue.StreamName("full", queue.Backlog)) == 0 && queuetest.Stored(t, ctx, b.JS, queue.StreamName("full", queue.Ready)) == 0
	})
	for _, j := range append(backlog, blocker) {
		if n := rec.startCount(j.ID); n != 1 {
			t.Errorf("job %s started %d times, want once", j.ID, n)
		}
	}
}

// A retry is a nak with a delay: the job stays in READY, so a READY at
// its capacity — here held full by the failing job itself — cannot refuse
// it. The job is tried again and succeeds; nothing is re-published.
func TestRetryInFullReady(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("retryfull")
	cfg.ReadyCapacity = 1
	ctx, b := queuetest.StartQueue(t, cfg)
	j := queuetest.NewJob(t, "retryfull", "a")
	if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	full := make(chan error, 1)
	policy := retry.Policy{MaxAttempts: 3, Initial: 300 * time.Millisecond, Max: time.Second, Jitter: -1}
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Retry: policy, Observe: rec.observe}, func(ctx context.Context, job *queue.Job) error {
		rec.started(job)
		if rec.startCount(job.ID) == 1 {
			// READY is full while the job waits for its retry.
			_, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "retryfull", "b"))
			full <- err
			return errors.New("try again")
		}
		return nil
	})
	rec.waitFor(t, 20*time.Second, "the retried job to succeed", func() bool { return rec.count(worker.Succeeded) == 1 })
	if err := <-full; !errors.Is(err, queue.ErrReadyFull) { // sent before the first try ended
		t.Errorf("a publish while the job ran: %v, want ErrReadyFull (READY held the job)", err)
	}
	if n := rec.startCount(j.ID); n != 2 || rec.count(worker.Retrying) != 1 {
		t.Errorf("the job ran %d times with %d retries, want 2 and 1", n, rec.count(worker.Retrying))
	}
	rec.waitFor(t, 20*time.Second, "READY to empty", func() bool { return queuetest.Stored(t, ctx, b.JS, queue.StreamName("retryfull", queue.Ready)) == 0 })
}
func (r *recorder) startCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.starts[id])
}
