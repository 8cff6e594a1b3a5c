package jobstatus

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// ResetForReplay, a admin.ReplayOptions.Prepare, makes a replayed job's
// record say it was just admitted (or queued) with no tries yet: workers
// only ever advance a record, and would leave a dead one dead. undo puts
// back what was there, for a replay that failed. Status is advisory: a
// failure is a note, not an error.
func (s *Store) ResetForReplay(ctx context.Context, job queue.Job, l admin.DeadLetter, to queue.Destination, now time.Time) (undo func(), note string) {
	if ValidateID(job.ID) != nil {
		return nil, ""
	}
	prev, err := s.Get(ctx, job.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		// Expired: what it would say is that the job is dead.
		prev = Record{
			ID: job.ID, Queue: job.Queue, State: spillway.StateDead, Attempts: l.Attempts, LastError: l.LastError,
			EnqueuedAt: job.EnqueuedAt, FinishedAt: l.DeadAt, UpdatedAt: l.DeadAt, Submitter: job.Header.Get(spillway.HeaderSubmitter),
		}
	case err != nil:
		return nil, "its status record was not reset: " + err.Error()
	}
	state := spillway.StateAdmitted
	if to == queue.Backlog {
		state = spillway.StateQueued
	}
	reset := Record{ID: job.ID, Queue: job.Queue, State: state, LastError: prev.LastError, EnqueuedAt: now, UpdatedAt: now,
		Submitter: cmp.Or(job.Header.Get(spillway.HeaderSubmitter), prev.Submitter)}
	// The claim of its first start goes first: the replayed job starts
	// anew, and can be cancelled once its record says queued — a cancel's
	// claim made after that is never deleted here.
	_ = s.kv(job.ID).Delete(ctx, claimKey(job.ID))
	if err := s.Put(ctx, reset); err != nil {
		return nil, "its status record was not reset: " + err.Error()
	}
	return func() { _ = s.Put(context.WithoutCancel(ctx), prev) }, ""
}
