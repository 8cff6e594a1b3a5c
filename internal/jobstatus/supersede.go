package jobstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A debounced job that a newer job of its debounce key replaces ends
// superseded (docs/design.md#debounce). Superseding is a cancel made by
// the admitter that stored the newer job: it races a worker's start for
// the job's claim in the same way (cancel.go), so a superseded job never
// starts, and a job whose start won the claim runs: too late to
// supersede.

// Supersede marks queued job rec.ID superseded by the newer job
// rec.SupersededBy. rec carries what the caller knows of the job (its
// queue, submitter, backlog sequence, enqueue and start times), for a job
// whose first record is not written yet. It wins the job's claim, then
// writes superseded over the job's queued record (or creates the record,
// which the admitter's first write then does not overwrite). It reports
// false when the job's claim was won before: by a start (the job runs),
// a cancel, or an earlier supersede; the caller then leaves the job
// alone. After it returns true the job never starts, and the caller
// removes it from the backlog (admin.CancelBacklogJob).
func (s *Store) Supersede(ctx context.Context, rec Record) (bool, error) {
	if err := ValidateID(rec.SupersededBy); err != nil {
		return false, fmt.Errorf("jobstatus: superseding job %s: the newer job: %w", rec.ID, err)
	}
	now := time.Now()
	rec.State, rec.UpdatedAt, rec.FinishedAt, rec.Attempts = spillway.StateSuperseded, now, now, 0
	claimed, won, err := s.claim(ctx, rec)
	if err != nil {
		return false, err
	}
	if !won {
		return false, nil
	}
	return true, s.writeSuperseded(ctx, claimed)
}

// writeSuperseded writes out (superseded) as job out.ID's record: over
// a queued record under a revision check, or as the job's first record.
// A record that is further along (an expired job the drain dead-lettered
// without a start) is left as it is.
func (s *Store) writeSuperseded(ctx context.Context, out Record) error {
	kv := s.kv(out.ID)
	for range 8 {
		cur, rev, err := s.getAny(ctx, out.ID)
		switch {
		case errors.Is(err, ErrNotFound), errors.Is(err, errGroupRead):
			rev = 0 // no record of its own yet: this is its first
		case err != nil && rev == 0:
			return err
		case err == nil && cur.State != spillway.StateQueued:
			return nil
		default:
			out = supersededOver(cur, out)
		}
		_, data, err := encode(out)
		if err != nil {
			return err
		}
		err = writeAt(ctx, kv, out.ID, data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // the first record landed meanwhile: write over it
		}
		if err != nil {
			return fmt.Errorf("jobstatus: writing job %s: %w", out.ID, err)
		}
		return nil
	}
	return fmt.Errorf("jobstatus: writing job %s: its record keeps changing", out.ID)
}

// supersededOver is out written over cur, the job's queued record: what
// out leaves zero is kept from cur.
func supersededOver(cur, out Record) Record {
	if out.Queue == "" {
		out.Queue = cur.Queue
	}
	if out.Submitter == "" {
		out.Submitter = cur.Submitter
	}
	if out.BacklogSeq == 0 {
		out.BacklogSeq = cur.BacklogSeq
	}
	if out.EnqueuedAt.IsZero() {
		out.EnqueuedAt = cur.EnqueuedAt
	}
	if out.NotBefore.IsZero() {
		out.NotBefore = cur.NotBefore
	}
	return out
}
