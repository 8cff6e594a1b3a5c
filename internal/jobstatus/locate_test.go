package jobstatus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// An admitted job has no record until its outcome: the Locator reads its
// status from its READY message — admitted, its queue, enqueue time,
// not-before and submitter — answers a cancel as for an admitted record,
// hides it from another submitter, and once a worker ran it (its outcome
// written before its ack), reads its record.
func TestLocatorReadsAdmittedJobsFromReady(t *testing.T) {
	t.Parallel()
	s, js := openJS(t)
	ctx := t.Context()
	cfg := queue.Config{Name: "email", Memory: true, LeakRate: bucket.Rate{Count: 100, Per: time.Second}}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	loc := jobstatus.NewLocator(s, js, func() []string { return []string{"other", "email"} })
	j := job(t)
	j.EnqueuedAt = time.Now().UTC().Truncate(time.Microsecond)
	j.NotBefore = j.EnqueuedAt.Add(time.Second)
	j.Header = map[string][]string{spillway.HeaderSubmitter: {"sha256:0123456789ab"}}
	if _, err := pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	rec, err := loc.Get(ctx, j.ID)
	want := jobstatus.Record{ID: j.ID, Queue: "email", State: spillway.StateAdmitted, EnqueuedAt: j.EnqueuedAt, NotBefore: j.NotBefore,
		UpdatedAt: j.EnqueuedAt, Submitter: "sha256:0123456789ab"}
	if err != nil || !rec.EnqueuedAt.Equal(want.EnqueuedAt) || !rec.NotBefore.Equal(want.NotBefore) || !rec.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("Get %s = %+v, %v; want %+v", j.ID, rec, err, want)
	}
	rec.EnqueuedAt, rec.NotBefore, rec.UpdatedAt = want.EnqueuedAt, want.NotBefore, want.UpdatedAt
	if rec != want {
		t.Errorf("Get %s = %+v, want %+v", j.ID, rec, want)
	}
	if _, err := s.Get(ctx, j.ID); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("the store's Get %s: %v, want no record", j.ID, err)
	}
	var nc *jobstatus.NotCancellableError
	if _, err := loc.CancelAs(ctx, j.ID, "x", nil); !errors.As(err, &nc) || nc.Record.State != spillway.StateAdmitted {
		t.Errorf("cancel of an admitted job: %v, want not cancellable, admitted", err)
	}
	if _, err := loc.CancelAs(ctx, j.ID, "x", func(r jobstatus.Record) bool { return r.Submitter == "sha256:ffffffffffff" }); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("cancel of another submitter's job: %v, want not found", err)
	}
	unknown := job(t)
	if _, err := loc.Get(ctx, unknown.ID); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("Get of an unknown job: %v, want not found", err)
	}
	if _, err := jobstatus.NewLocator(s, js, func() []string { return []string{"other"} }).Get(ctx, j.ID); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("Get with its queue not configured: %v, want not found", err)
	}

	// A worker runs it: its outcome is its record, written before the
	// ack, and it is no longer in READY.
	r := jobstatus.NewRecorder(s, nil, 0)
	run(t, r)
	w, err := worker.NewWorker(js, worker.WorkerConfig{Queue: cfg, FetchWait: 50 * time.Millisecond, Observe: r.Observe, Outcome: r.Outcome},
		func(context.Context, *queue.Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := loc.Get(ctx, j.ID)
		if err != nil {
			t.Fatalf("Get %s while it runs: %v; a job is in READY or in its record", j.ID, err)
		}
		if rec.State == spillway.StateSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %s after 10s, want succeeded", j.ID, rec.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker Run: %v", err)
	}
	if m, err := queue.FindReady(ctx, js, "email", j.ID); m != nil || err != nil {
		t.Errorf("READY after the job succeeded: %v, %v; want nothing", m, err)
	}
}

// A READY job's outcome is written by Outcome itself, before it returns,
// whether or not the Recorder's buffer has room: it is not dropped as an
// update may be, and not written a second time from its event.
func TestRecorderOutcomeIsNotDropped(t *testing.T) {
	t.Parallel()
	s, _ := openJS(t)
	r := jobstatus.NewRecorder(s, nil, 1) // not running: its buffer fills at once
	filler := job(t)
	for range 3 {
		r.Observe(worker.Event{Kind: worker.Retrying, Queue: "email", Job: filler, Attempt: 1, Err: errors.New("x")})
	}
	j := job(t)
	ev := worker.Event{Kind: worker.Succeeded, Queue: "email", Job: j, Attempt: 1, Stream: queue.StreamName("email", queue.Ready), Took: time.Millisecond}
	if err := r.Outcome(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(t.Context(), j.ID)
	if err != nil || rec.State != spillway.StateSucceeded || rec.Attempts != 1 {
		t.Errorf("record after Outcome: %+v, %v; want succeeded after 1 try", rec, err)
	}
	dropped := r.Dropped()
	r.Observe(ev) // written already: not queued, not dropped
	if r.Dropped() != dropped {
		t.Errorf("the outcome's event was queued again: dropped %d, then %d", dropped, r.Dropped())
	}
}
