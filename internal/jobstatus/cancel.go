package jobstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// NotCancellableError is Store.Cancel's error for a job that is not
// queued: it is admitted, running, done, dead or cancelled already.
type NotCancellableError struct {
	Record Record // the record as it is
}

func (e *NotCancellableError) Error() string {
	return fmt.Sprintf("jobstatus: job %s is %s: only a queued job can be cancelled", e.Record.ID, e.Record.State)
}

// Cancel marks queued job id cancelled and returns the stored record. It
// writes only over a record that is queued, under a revision check, and a
// worker starting the job writes running under the same check
// (StartGate), so exactly one of the two wins: after Cancel returns nil the
// job never starts, and the caller removes it from the backlog
// (queue.CancelBacklogJob at Record.BacklogSeq). A job in any other state
// is a *NotCancellableError holding its record; none is ErrNotFound.
func (s *Store) Cancel(ctx context.Context, id string) (Record, error) {
	if err := ValidateID(id); err != nil {
		return Record{}, err
	}
	for {
		cur, rev, legacy, err := s.getAny(ctx, id)
		if err != nil {
			return Record{}, err
		}
		kv := s.kv(id)
		if legacy {
			kv = s.legacy // where the start gate writes too (Advance)
		}
		if cur.State != Queued {
			return Record{}, &NotCancellableError{Record: cur}
		}
		out := cur
		out.State, out.UpdatedAt, out.FinishedAt = Cancelled, time.Now(), time.Now()
		out, data, err := encode(out)
		if err != nil {
			return Record{}, err
		}
		_, err = kv.Update(ctx, id, data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // a worker, or another cancel, wrote first: look again
		}
		if err != nil {
			return Record{}, fmt.Errorf("jobstatus: writing job %s: %w", id, err)
		}
		return out, nil
	}
}

// StartGate is a queue.WorkerConfig.StartGate over s: it writes the job's
// running record synchronously (Advance), and answers
// queue.ErrJobCancelled when the record is cancelled. Since both this write
// and Cancel's are revision-checked writes of one record, a job is either
// cancelled or started, never both. A job with no record (the admitter's
// write was lost, or the record expired) starts, and gets one.
func (s *Store) StartGate(ctx context.Context, e queue.Event) error {
	rec, ok := update(e, time.Now())
	if !ok {
		return nil
	}
	cur, applied, err := s.Advance(ctx, rec)
	if err != nil {
		return err
	}
	if !applied && cur.State == Cancelled {
		return fmt.Errorf("%w: %s", queue.ErrJobCancelled, rec.ID)
	}
	return nil
}
