package jobstatus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The Recorder as a real worker's Observe: a job that fails once, then
// succeeds, ends up succeeded after two tries with the first try's error.
func TestRecorderWithAWorker(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	store, err := jobstatus.Open(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	rec := jobstatus.NewRecorder(store, nil, 0)
	stopRecorder := run(t, rec)

	cfg := queue.Config{Name: "email", Memory: true, LeakRate: bucket.Rate{Count: 50, Per: time.Second}}
	if err := queue.EnsureStreams(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	w, err := worker.NewWorker(js, worker.WorkerConfig{
		Queue:     cfg,
		Retry:     retry.Policy{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1},
		FetchWait: 100 * time.Millisecond,
		Observe:   rec.Observe,
	}, func(_ context.Context, j *queue.Job) error {
		if j.Attempt == 1 {
			return errors.New("smtp: 421 try later")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	j := &queue.Job{ID: newID(t), Queue: "email", Key: "tenant-42", Cost: 1, EnqueuedAt: time.Now(), Payload: []byte("hi")}
	if _, err := pub.Publish(t.Context(), queue.Ready, j); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := waitFor(t, store, j.ID, "succeeded", func(r jobstatus.Record) bool { return r.State == spillway.StateSucceeded })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker Run: %v", err)
	}
	stopRecorder() // after the worker, as the docs ask
	if got.Attempts != 2 || got.LastError != "smtp: 421 try later" || got.Queue != "email" ||
		!got.EnqueuedAt.Equal(j.EnqueuedAt.UTC().Round(0)) || got.StartedAt.IsZero() || got.FinishedAt.Before(got.StartedAt) {
		t.Errorf("record %+v: want succeeded on the second try, with the first one's error", got)
	}
	if n := rec.Dropped(); n != 0 {
		t.Errorf("%d updates dropped", n)
	}
}
