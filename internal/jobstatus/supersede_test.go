package jobstatus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Supersede ends a queued job as a cancel does: its record reads
// superseded (by the newer job), the start gate refuses it, and no later
// update, cancel or second supersede changes it.
func TestSupersede(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	ctx := t.Context()
	j, newer := job(t), newID(t)
	if err := s.Create(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued, EnqueuedAt: t0, BacklogSeq: 7, Submitter: "sha256:a"}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.Supersede(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, SupersededBy: newer})
	if !ok || err != nil {
		t.Fatalf("Supersede a queued job: %v, %v; want done", ok, err)
	}
	rec, err := s.Get(ctx, j.ID)
	if err != nil || rec.State != spillway.StateSuperseded || rec.SupersededBy != newer || rec.FinishedAt.IsZero() ||
		rec.BacklogSeq != 7 || rec.Submitter != "sha256:a" || !rec.EnqueuedAt.Equal(t0) {
		t.Errorf("record %+v %v; want superseded by %s, keeping its place, submitter and enqueue time", rec, err, newer)
	}
	if err := s.StartGate(ctx, started(j)); !errors.Is(err, worker.ErrJobCancelled) {
		t.Errorf("StartGate of a superseded job: %v, want ErrJobCancelled", err)
	}
	if ok, err := s.Supersede(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, SupersededBy: newID(t)}); ok || err != nil {
		t.Errorf("Supersede again: %v, %v; want not done", ok, err)
	}
	var nc *jobstatus.NotCancellableError
	if _, err := s.Cancel(ctx, j.ID); !errors.As(err, &nc) || nc.Record.State != spillway.StateSuperseded {
		t.Errorf("Cancel a superseded job: %v, want NotCancellableError, superseded", err)
	}
	if _, ok, err := s.Advance(ctx, jobstatus.Record{ID: j.ID, State: spillway.StateSucceeded, Attempts: 1}); ok || err != nil {
		t.Errorf("Advance a superseded job: applied %v, %v; want refused", ok, err)
	}
	if rec, _ := s.Get(ctx, j.ID); rec.SupersededBy != newer {
		t.Errorf("record %+v, want still superseded by %s", rec, newer)
	}
}

// A job whose first record is not written yet is superseded all the
// same, and the admitter's first record, coming later, does not undo it.
func TestSupersedeBeforeTheFirstRecord(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	ctx := t.Context()
	j, newer := job(t), newID(t)
	if ok, err := s.Supersede(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, SupersededBy: newer, BacklogSeq: 3, EnqueuedAt: t0}); !ok || err != nil {
		t.Fatalf("Supersede a job with no record: %v, %v; want done", ok, err)
	}
	if err := s.Create(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued, EnqueuedAt: t0, BacklogSeq: 3}); !errors.Is(err, jobstatus.ErrExists) {
		t.Errorf("the first record after the supersede: %v, want ErrExists", err)
	}
	if rec, err := s.Get(ctx, j.ID); err != nil || rec.State != spillway.StateSuperseded || rec.BacklogSeq != 3 {
		t.Errorf("record %+v %v; want superseded at backlog place 3", rec, err)
	}
}

// A job whose start came first is not superseded (it runs); one that was
// cancelled stays cancelled.
func TestSupersedeTooLate(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	ctx := t.Context()
	j := job(t)
	if err := s.Create(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateQueued}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartGate(ctx, started(j)); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Supersede(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, SupersededBy: newID(t)}); ok || err != nil {
		t.Errorf("Supersede a started job: %v, %v; want not done", ok, err)
	}
	if rec, _ := s.Get(ctx, j.ID); rec.State != spillway.StateRunning {
		t.Errorf("record %+v, want running", rec)
	}

	c := job(t)
	if err := s.Create(ctx, jobstatus.Record{ID: c.ID, Queue: c.Queue, State: spillway.StateQueued}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Supersede(ctx, jobstatus.Record{ID: c.ID, Queue: c.Queue, SupersededBy: newID(t)}); ok || err != nil {
		t.Errorf("Supersede a cancelled job: %v, %v; want not done", ok, err)
	}
	if rec, _ := s.Get(ctx, c.ID); rec.State != spillway.StateCancelled {
		t.Errorf("record %+v, want cancelled", rec)
	}
	if _, err := s.Supersede(context.Background(), jobstatus.Record{ID: c.ID, SupersededBy: "x"}); !errors.Is(err, jobstatus.ErrInvalidID) {
		t.Errorf("Supersede by a job id that is none: %v, want ErrInvalidID", err)
	}
}
