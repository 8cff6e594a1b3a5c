package jobstatus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// run runs r until the test ends, and fails the test if Run does not
// return within 10s of being stopped.
func run(t *testing.T, r *jobstatus.Recorder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context ending")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls the store until cond holds for the record of id, failing
// the test after 10s.
func waitFor(t *testing.T, s *jobstatus.Store, id, what string, cond func(jobstatus.Record) bool) jobstatus.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := s.Get(t.Context(), id)
		if err == nil && cond(rec) {
			return rec
		}
		if err != nil && !errors.Is(err, jobstatus.ErrNotFound) {
			t.Fatalf("Get %s: %v", id, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: still not %s after 10s: %+v, %v", id, what, rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func job(t *testing.T) *queue.Job {
	t.Helper()
	return &queue.Job{ID: newID(t), Queue: "email", Key: "tenant-42", Cost: 1, EnqueuedAt: t0}
}

func TestRecorderFollowsAJob(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, nil, 0)
	run(t, r)
	j := job(t)
	ev := func(kind worker.EventKind, attempt int) worker.Event {
		return worker.Event{Kind: kind, Queue: "email", Job: j, Attempt: attempt, Took: 20 * time.Millisecond}
	}
	before := time.Now()
	retrying := ev(worker.Retrying, 1)
	retrying.Err, retrying.Delay = errors.New("POST http://x: 500 Internal Server Error: down\nfor maintenance"), time.Minute
	r.Observe(ev(worker.Released, 0)) // changes nothing
	r.Observe(ev(worker.Started, 1))
	r.Observe(retrying)
	rec := waitFor(t, s, j.ID, "retrying", func(r jobstatus.Record) bool { return r.State == spillway.StateRetrying })
	if rec.Attempts != 1 || rec.LastError != "POST http://x: 500 Internal Server Error: down for maintenance" ||
		rec.NotBefore.Before(before.Add(time.Minute)) || !rec.EnqueuedAt.Equal(t0) || rec.Queue != "email" || rec.StartedAt.IsZero() || !rec.FinishedAt.IsZero() {
		t.Errorf("after a failed try: %+v", rec)
	}
	r.Observe(ev(worker.Started, 2))
	r.Observe(ev(worker.HandedBack, 2)) // changes nothing
	r.Observe(ev(worker.Started, 3))
	r.Observe(ev(worker.Succeeded, 3))
	rec = waitFor(t, s, j.ID, "succeeded", func(r jobstatus.Record) bool { return r.State == spillway.StateSucceeded })
	if rec.Attempts != 3 || !strings.HasPrefix(rec.LastError, "POST http://x: 500") || rec.FinishedAt.IsZero() || rec.FinishedAt.Before(rec.StartedAt) {
		t.Errorf("after success on the third try: %+v", rec)
	}

	// A late report from another worker (the one that handed attempt 2
	// back, say) does not undo the success: a second Recorder, as in
	// another process.
	other := jobstatus.NewRecorder(s, nil, 0)
	run(t, other)
	other.Observe(ev(worker.Started, 3))
	other.Observe(ev(worker.Retrying, 2))
	marker := job(t)
	other.Observe(worker.Event{Kind: worker.Started, Job: marker, Attempt: 1})
	waitFor(t, s, marker.ID, "running", func(r jobstatus.Record) bool { return r.State == spillway.StateRunning })
	if rec, err := s.Get(t.Context(), j.ID); err != nil || rec.State != spillway.StateSucceeded || rec.Attempts != 3 {
		t.Errorf("after late reports: %+v, %v; want succeeded after 3 tries", rec, err)
	}
	if n := r.Dropped() + other.Dropped(); n != 0 {
		t.Errorf("%d updates dropped", n)
	}
}

func TestRecorderDeadLetters(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, nil, 0)
	run(t, r)
	exhausted, expired, invalid := job(t), job(t), job(t)
	r.Observe(worker.Event{Kind: worker.DeadLettered, Job: exhausted, Attempt: 5, Err: retry.Permanent(errors.New("404 Not Found")), Reason: "permanent error"})
	r.Observe(worker.Event{Kind: worker.DeadLettered, Job: expired, Reason: "expired in backlog"})
	r.Observe(worker.Event{Kind: worker.DeadLettered, Reason: "invalid job"}) // no Job: no record
	for id, want := range map[string]string{exhausted.ID: "permanent error: permanent: 404 Not Found", expired.ID: "expired in backlog"} {
		rec := waitFor(t, s, id, "dead", func(r jobstatus.Record) bool { return r.State == spillway.StateDead })
		if rec.LastError != want || rec.FinishedAt.IsZero() {
			t.Errorf("dead record %+v: want last error %q and a finish time", rec, want)
		}
	}
	if _, err := s.Get(t.Context(), invalid.ID); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("a job never observed has a record: %v", err)
	}
}

// The last error is one line of at most MaxErrorLen bytes.
func TestRecorderBoundsTheError(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, nil, 0)
	run(t, r)
	j := job(t)
	r.Observe(worker.Event{Kind: worker.Retrying, Job: j, Attempt: 1, Err: errors.New(strings.Repeat("€\n", 1000))})
	rec := waitFor(t, s, j.ID, "retrying", func(r jobstatus.Record) bool { return r.State == spillway.StateRetrying })
	if len(rec.LastError) > jobstatus.MaxErrorLen || strings.Contains(rec.LastError, "\n") || !strings.HasPrefix(rec.LastError, "€ €") {
		t.Errorf("last error of %d bytes: %.40q…", len(rec.LastError), rec.LastError)
	}
}

// Many updates of many jobs, observed from many goroutines as workers do:
// each job's record ends at its last step.
func TestRecorderKeepsEachJobInOrder(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, nil, 10_000)
	run(t, r)
	jobs := make([]*queue.Job, 50)
	done := make(chan struct{})
	for i := range jobs {
		jobs[i] = job(t)
		go func(j *queue.Job) {
			defer func() { done <- struct{}{} }()
			for attempt := 1; attempt <= 5; attempt++ {
				r.Observe(worker.Event{Kind: worker.Started, Job: j, Attempt: attempt})
				if attempt < 5 {
					r.Observe(worker.Event{Kind: worker.Retrying, Job: j, Attempt: attempt, Err: errors.New("try again")})
				}
			}
			r.Observe(worker.Event{Kind: worker.Succeeded, Job: j, Attempt: 5})
		}(jobs[i])
	}
	for range jobs {
		<-done
	}
	for _, j := range jobs {
		rec := waitFor(t, s, j.ID, "succeeded", func(r jobstatus.Record) bool { return r.State == spillway.StateSucceeded })
		if rec.Attempts != 5 || rec.LastError != "try again" {
			t.Errorf("job %s: %+v", j.ID, rec)
		}
	}
	if n := r.Dropped(); n != 0 {
		t.Errorf("%d updates dropped with room for all", n)
	}
}

// Observe never blocks: past the buffer it drops and counts. Run, started
// with its context already ended, flushes what the buffer holds and returns.
func TestRecorderOverflowAndFlush(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, slog.New(slog.DiscardHandler), 3)
	jobs := make([]*queue.Job, 10)
	for i := range jobs {
		jobs[i] = job(t)
		r.Observe(worker.Event{Kind: worker.Started, Job: jobs[i], Attempt: 1}) // nobody reads yet
	}
	if n := r.Dropped(); n != 7 {
		t.Errorf("Dropped() = %d after 10 updates into a buffer of 3, want 7", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i, j := range jobs {
		_, err := s.Get(t.Context(), j.ID)
		switch {
		case i < 3 && err != nil:
			t.Errorf("job %d of the buffer was not flushed: %v", i, err)
		case i >= 3 && !errors.Is(err, jobstatus.ErrNotFound):
			t.Errorf("dropped job %d has a record: %v", i, err)
		}
	}
}

func TestRecorderRunsOnce(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, nil, 0)
	run(t, r)
	j := job(t)
	r.Observe(worker.Event{Kind: worker.Started, Job: j, Attempt: 1})
	waitFor(t, s, j.ID, "running", func(r jobstatus.Record) bool { return r.State == spillway.StateRunning }) // so Run runs
	if err := r.Run(t.Context()); err == nil {
		t.Error("a second Run while the first runs returned nil, want an error")
	}
}

// A job dead-lettered for its expiry (Spillway-Max-Wait) is expired, not
// dead, with the reason and when it expired as its last error.
func TestRecorderExpired(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	r := jobstatus.NewRecorder(s, nil, 0)
	run(t, r)
	j := job(t)
	r.Observe(worker.Event{Kind: worker.DeadLettered, Job: j, Reason: queue.ReasonExpired, Err: errors.New("expires at 2026-01-01T00:00:02Z")})
	rec := waitFor(t, s, j.ID, "expired", func(r jobstatus.Record) bool { return r.State == spillway.StateExpired })
	if rec.LastError != "expired: expires at 2026-01-01T00:00:02Z" || rec.FinishedAt.IsZero() || !rec.State.Final() {
		t.Errorf("expired record %+v: want the reason in its last error, a finish time, a final state", rec)
	}
}

// A cancelled job whose backlog message stayed (the cancel's delete failed)
// and then expired there is dead-lettered by the drain without a start: its
// record stays cancelled.
func TestRecorderKeepsACancelledJobCancelled(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	j := job(t)
	if err := s.Create(t.Context(), jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	r := jobstatus.NewRecorder(s, nil, 0)
	stop := run(t, r)
	r.Observe(worker.Event{Kind: worker.DeadLettered, Job: j, Reason: queue.ReasonExpired, Err: errors.New("expired in the backlog")})
	stop() // flushes what it was given
	if rec, err := s.Get(t.Context(), j.ID); err != nil || rec.State != spillway.StateCancelled {
		t.Errorf("record %+v, %v; want still cancelled", rec, err)
	}
}
