package jobstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// NotCancellableError is Store.Cancel's error for a job that is not
// queued: it is admitted, running, done, dead or cancelled already.
type NotCancellableError struct {
	Record Record // the record as it is
}

func (e *NotCancellableError) Error() string {
	return fmt.Sprintf("jobstatus: job %s is %s: only a queued job can be cancelled", e.Record.ID, e.Record.State)
}

// A backlog job's start and a cancel race for its claim: a key next to the
// job's record, in the same bucket, that each of them creates — a write
// that JetStream refuses when the key exists, so exactly one of the two
// creates it, and neither reads first. The claim holds the winner's
// record: running, or cancelled. Get shows it over a queued record.

// claimKey is the key of job id's claim.
func claimKey(id string) string { return id + ".start" }

// claim creates the claim of rec's job holding rec, and reports true; if
// the job has a claim already, it returns the record the claim holds and
// false.
func (s *Store) claim(ctx context.Context, rec Record) (Record, bool, error) {
	rec, data, err := encode(rec)
	if err != nil {
		return Record{}, false, err
	}
	kv := s.kv(rec.ID)
	for range 3 {
		_, cerr := kv.Create(ctx, claimKey(rec.ID), data)
		if cerr == nil {
			return rec, true, nil
		}
		// Lost the race (a key that exists, or, over a deleted claim, a
		// conditional write that another writer beat): the claim tells.
		cur, _, err := getIn(ctx, kv, claimKey(rec.ID))
		if !errors.Is(cerr, jetstream.ErrKeyExists) && err != nil {
			return Record{}, false, fmt.Errorf("jobstatus: claiming the start of job %s: %w", rec.ID, cerr)
		}
		if errors.Is(err, ErrNotFound) {
			continue // gone since (expired, or a replay cleared it): create it again
		}
		if err != nil {
			return Record{}, false, err
		}
		cur.ID = rec.ID
		return cur, false, nil
	}
	return Record{}, false, fmt.Errorf("jobstatus: claiming the start of job %s: the claim keeps changing", rec.ID)
}

// withClaim is what a job's record says given its claim: a queued record
// claimed by a start says running, by a cancel cancelled, by a newer job
// of its debounce key superseded.
func withClaim(rec, claim Record) Record {
	if rec.State != spillway.StateQueued {
		return rec
	}
	if claim.State == spillway.StateSuperseded {
		rec.State, rec.UpdatedAt, rec.FinishedAt, rec.SupersededBy = spillway.StateSuperseded, claim.UpdatedAt, claim.FinishedAt, claim.SupersededBy
		return rec
	}
	if claim.State == spillway.StateCancelled {
		rec.State, rec.UpdatedAt, rec.FinishedAt, rec.CancelledBy = spillway.StateCancelled, claim.UpdatedAt, claim.FinishedAt, claim.CancelledBy
		return rec
	}
	if out, ok := merge(rec, claim); ok {
		return out
	}
	return rec
}

// Cancel is CancelAs for an anonymous canceller who may cancel any job.
func (s *Store) Cancel(ctx context.Context, id string) (Record, error) {
	return s.CancelAs(ctx, id, "", nil)
}

// CancelAs marks queued job id cancelled by by (the canceller's key's
// fingerprint, kept as CancelledBy) and returns its record. A job whose
// record may does not accept (nil: every job) is ErrNotFound, as a job
// with no record is: the canceller is not to learn it exists. It wins
// the job's claim (a worker starting the job races for the same claim in
// StartGate), then writes cancelled over the queued record under a
// revision check: so after Cancel returns nil the job never starts, and
// the caller removes it from the backlog (admin.CancelBacklogJob at
// Record.BacklogSeq). A job in any other state is a *NotCancellableError
// holding its record; none is ErrNotFound.
func (s *Store) CancelAs(ctx context.Context, id, by string, may func(Record) bool) (Record, error) {
	if err := ValidateID(id); err != nil {
		return Record{}, err
	}
	cur, rev, err := s.getAny(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if may != nil && !may(cur) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if cur.State != spillway.StateQueued {
		return Record{}, &NotCancellableError{Record: cur}
	}
	out := cur
	out.State, out.UpdatedAt, out.FinishedAt, out.CancelledBy = spillway.StateCancelled, time.Now(), time.Now(), by
	claimed, won, err := s.claim(ctx, out)
	if err != nil {
		return Record{}, err
	}
	if !won {
		// Started, or cancelled by an earlier cancel (whose record write
		// may have failed: it is made now).
		cur = withClaim(cur, claimed)
		if cur.State == spillway.StateCancelled {
			_ = s.writeCancelled(ctx, cur, rev)
		}
		return Record{}, &NotCancellableError{Record: cur}
	}
	if err := s.writeCancelled(ctx, out, rev); err != nil {
		return Record{}, err
	}
	return out, nil
}

// writeCancelled writes cancelled over job's queued record, read at
// revision rev: a *NotCancellableError if the record moved on meanwhile.
func (s *Store) writeCancelled(ctx context.Context, out Record, rev uint64) error {
	kv := s.kv(out.ID)
	for {
		_, data, err := encode(out)
		if err != nil {
			return err
		}
		err = writeAt(ctx, kv, out.ID, data, rev)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if err != nil {
				return fmt.Errorf("jobstatus: writing job %s: %w", out.ID, err)
			}
			return nil
		}
		cur, r, err := getIn(ctx, kv, out.ID)
		if err != nil {
			return err
		}
		if cur.State == spillway.StateCancelled {
			return nil
		}
		if cur.State != spillway.StateQueued {
			return &NotCancellableError{Record: cur}
		}
		rev = r
		state, updated, finished, by := out.State, out.UpdatedAt, out.FinishedAt, out.CancelledBy
		out = cur
		out.State, out.UpdatedAt, out.FinishedAt, out.CancelledBy = state, updated, finished, by
	}
}

// StartGate is a worker.WorkerConfig.StartGate over s: before a backlog
// job's handler runs it wins the job's claim, holding the running record
// — one write, no read — and answers worker.ErrJobCancelled when a cancel
// won it, or a newer job of its debounce key that superseded it
// (supersede.go). A claim held by an earlier start (a worker that stopped or died
// mid-try) lets the job start again. A job with no record (the
// admitter's write was lost, or the record expired) starts.
func (s *Store) StartGate(ctx context.Context, e worker.Event) error {
	rec, ok := update(e, time.Now())
	if !ok {
		return nil
	}
	// The start wins the job (took), or finds what won it: a cancel, or an
	// earlier start of the same job.
	cur, took, err := s.claim(ctx, rec)
	if err != nil {
		return err
	}
	if !took && cur.State == spillway.StateCancelled {
		return fmt.Errorf("%w: %s", worker.ErrJobCancelled, rec.ID)
	}
	if !took && cur.State == spillway.StateSuperseded {
		return fmt.Errorf("%w: %s superseded by %s", worker.ErrJobCancelled, rec.ID, cur.SupersededBy)
	}
	return nil
}
