package jobstatus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func started(j *queue.Job) worker.Event {
	return worker.Event{Kind: worker.Started, Queue: j.Queue, Job: j, Attempt: 1, Stream: queue.StreamName(j.Queue, queue.Backlog), Sequence: 7}
}

// Cancel takes a queued job only; a cancelled record takes no later
// update, and the start gate refuses it.
func TestCancel(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	ctx := t.Context()
	j := job(t)
	if err := s.Create(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued, EnqueuedAt: t0, BacklogSeq: 7}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Cancel(ctx, j.ID)
	if err != nil || got.State != spillway.StateCancelled || got.BacklogSeq != 7 || got.FinishedAt.IsZero() || !got.EnqueuedAt.Equal(t0) {
		t.Fatalf("Cancel: %+v %v; want cancelled, keeping the backlog place and enqueue time", got, err)
	}
	var nc *jobstatus.NotCancellableError
	if _, err := s.Cancel(ctx, j.ID); !errors.As(err, &nc) || nc.Record.State != spillway.StateCancelled {
		t.Errorf("Cancel again: %v, want NotCancellableError, cancelled", err)
	}
	if err := s.StartGate(ctx, started(j)); !errors.Is(err, worker.ErrJobCancelled) {
		t.Errorf("StartGate of a cancelled job: %v, want ErrJobCancelled", err)
	}
	if _, ok, err := s.Advance(ctx, jobstatus.Record{ID: j.ID, State: spillway.StateSucceeded, Attempts: 1}); ok || err != nil {
		t.Errorf("Advance a cancelled job: applied %v, %v; want refused", ok, err)
	}
	if rec, _ := s.Get(ctx, j.ID); rec.State != spillway.StateCancelled {
		t.Errorf("record %+v, want still cancelled", rec)
	}

	for _, st := range []spillway.State{spillway.StateAdmitted, spillway.StateRunning, spillway.StateSucceeded, spillway.StateDead, spillway.StateRetrying} {
		id := newID(t)
		if err := s.Put(ctx, jobstatus.Record{ID: id, Queue: "email", State: st}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Cancel(ctx, id); !errors.As(err, &nc) || nc.Record.State != st {
			t.Errorf("Cancel a job %s: %v, want NotCancellableError with its state", st, err)
		}
	}
	if _, err := s.Cancel(ctx, newID(t)); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("Cancel an unknown job: %v, want ErrNotFound", err)
	}
	if _, err := s.Cancel(ctx, "*"); !errors.Is(err, jobstatus.ErrInvalidID) {
		t.Errorf("Cancel %q: %v, want ErrInvalidID", "*", err)
	}
}

// A cancel and a start of the same queued job, at once: exactly one wins,
// every time.
func TestCancelRacesAStart(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	ctx := context.WithoutCancel(t.Context())
	for range 50 {
		j := job(t)
		if err := s.Create(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued}); err != nil {
			t.Fatal(err)
		}
		raceCancelAndStart(t, s, j)
	}
}

// raceCancelAndStart cancels and starts job j at once and fails t unless
// exactly one of the two won, as its record says.
func raceCancelAndStart(t *testing.T, s *jobstatus.Store, j *queue.Job) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	var (
		wg                 sync.WaitGroup
		cancelErr, gateErr error
	)
	wg.Go(func() { _, cancelErr = s.Cancel(ctx, j.ID) })
	wg.Go(func() { gateErr = s.StartGate(ctx, started(j)) })
	wg.Wait()
	rec, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	st := rec.State
	var nc *jobstatus.NotCancellableError
	switch {
	case cancelErr == nil && errors.Is(gateErr, worker.ErrJobCancelled) && st == spillway.StateCancelled:
	case gateErr == nil && errors.As(cancelErr, &nc) && nc.Record.State == spillway.StateRunning && st == spillway.StateRunning:
	default:
		t.Fatalf("cancel: %v, start gate: %v, record %s; want exactly one to win", cancelErr, gateErr, st)
	}
}

// A job cancelled in its record but still in the backlog (the cancel's
// delete failed) never runs: the worker granted it finds it cancelled at
// its start gate and removes it. Without the gate, the worker would run
// it.
func TestCancelledJobLeftInTheBacklog(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	store, err := jobstatus.Open(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := queue.Config{Name: "email", Memory: true, LeakRate: bucket.Rate{Count: 50, Per: time.Second}}
	if err := queue.EnsureStreams(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, kept := job(t), job(t)
	for _, j := range []*queue.Job{cancelled, kept} {
		j.EnqueuedAt = time.Now()
		at, err := pub.Publish(t.Context(), queue.Backlog, j)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Create(t.Context(), jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued, BacklogSeq: at.Sequence}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Cancel(t.Context(), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	rec := jobstatus.NewRecorder(store, nil, 0)
	stopRecorder := run(t, rec)
	ran := make(chan string, 4)
	w, err := worker.NewWorker(js, worker.WorkerConfig{Queue: cfg, FetchWait: 50 * time.Millisecond, Observe: rec.Observe, StartGate: rec.StartGate},
		func(_ context.Context, j *queue.Job) error { ran <- j.ID; return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitFor(t, store, kept.ID, "succeeded", func(r jobstatus.Record) bool { return r.State == spillway.StateSucceeded })
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := admin.Inspect(t.Context(), js, cfg)
		if err == nil && info.Backlog == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled job was not removed from the backlog within 10s: %+v %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker Run: %v", err)
	}
	stopRecorder()
	close(ran)
	for id := range ran {
		if id == cancelled.ID {
			t.Errorf("the cancelled job %s ran", id)
		}
	}
	if r, _ := store.Get(t.Context(), cancelled.ID); r.State != spillway.StateCancelled {
		t.Errorf("the cancelled job's record: %+v, want cancelled", r)
	}
}

// The start and cancel claims: a started backlog job reads running, a job
// started again after its worker died starts, and a replay clears the
// claim, so the replayed job can be cancelled while queued. A job whose
// record is lost still gets its claim, and reads as it.
func TestStartClaim(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	ctx := t.Context()
	j := job(t)
	if err := s.Create(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued, BacklogSeq: 7}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartGate(ctx, started(j)); err != nil {
		t.Fatalf("StartGate: %v", err)
	}
	if rec, err := s.Get(ctx, j.ID); err != nil || rec.State != spillway.StateRunning || rec.BacklogSeq != 7 || rec.StartedAt.IsZero() {
		t.Errorf("Get after the start: %+v, %v; want running, keeping the backlog place", rec, err)
	}
	if err := s.StartGate(ctx, started(j)); err != nil {
		t.Errorf("StartGate again (a worker died mid-try): %v, want it to start", err)
	}
	var nc *jobstatus.NotCancellableError
	if _, err := s.Cancel(ctx, j.ID); !errors.As(err, &nc) || nc.Record.State != spillway.StateRunning {
		t.Errorf("Cancel a started job: %v, want NotCancellableError, running", err)
	}
	undo, note := s.ResetForReplay(ctx, *j, admin.DeadLetter{Attempts: 1, LastError: "boom"}, queue.Backlog, time.Now())
	if undo == nil {
		t.Fatalf("ResetForReplay: %s", note)
	}
	if rec, err := s.Get(ctx, j.ID); err != nil || rec.State != spillway.StateQueued {
		t.Errorf("Get after a replay to the backlog: %+v, %v; want queued", rec, err)
	}
	if rec, err := s.Cancel(ctx, j.ID); err != nil || rec.State != spillway.StateCancelled {
		t.Errorf("Cancel the replayed job: %+v, %v; want cancelled", rec, err)
	}

	lost := job(t)
	if err := s.StartGate(ctx, started(lost)); err != nil {
		t.Fatalf("StartGate of a job with no record: %v", err)
	}
	if rec, err := s.Get(ctx, lost.ID); err != nil || rec.State != spillway.StateRunning {
		t.Errorf("Get of a started job with no record: %+v, %v; want running", rec, err)
	}
}
