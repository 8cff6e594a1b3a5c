package queuetest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// The kit end to end: a queue of 3 takes 3 of 5 jobs and refuses 2 as
// full; a worker started with RunWorker runs what READY holds and stops
// when told.
func TestQueueKit(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("kit")
	cfg.Capacity = 3
	ctx, q := queuetest.StartQueue(t, cfg)
	var jobs []*queue.Job
	for range 5 {
		jobs = append(jobs, queuetest.NewJob(t, "kit", "k"))
	}
	ok, full, keyFull, other := q.PublishAll(ctx, queue.Backlog, jobs)
	if ok != 3 || full != 2 || keyFull != 0 || len(other) != 0 {
		t.Fatalf("published %d, %d full, %d key full, others %v; want 3, 2, 0, none", ok, full, keyFull, other)
	}
	if n := queuetest.Stored(t, ctx, q.JS, queue.StreamName("kit", queue.Backlog)); n != 3 {
		t.Fatalf("BACKLOG holds %d, want 3", n)
	}

	j := queuetest.NewJob(t, "kit", "r")
	if _, err := q.Pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	done := make(chan struct{})
	stop := queuetest.RunWorker(t, q.JS, worker.WorkerConfig{Queue: q.Config}, func(_ context.Context, got *queue.Job) error {
		if got.ID == j.ID && ran.Add(1) == 1 {
			close(done)
		}
		return nil
	})
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the worker did not run the READY job")
	}
	stop()
	stop() // and again in t.Cleanup: once is what counts
}

// StartExample's server takes a queue's streams, and stop returns, after
// which the JetStream context answers no more.
func TestStartExample(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := queuetest.StartExample()
	if err := queue.EnsureStreams(ctx, js, queuetest.QueueConfig("ex")); err != nil {
		stop()
		t.Fatal(err)
	}
	stop()
	if _, err := js.AccountInfo(ctx); err == nil {
		t.Fatal("the server answers after stop")
	}
}
