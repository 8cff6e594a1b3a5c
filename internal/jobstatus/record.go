package jobstatus

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// rank orders the states of one try: a record moves to an equal or higher
// rank, or to a later try. A state that is not one of spillway's eight
// has rank -1.
func rank(s spillway.State) int {
	switch s {
	case spillway.StateAdmitted, spillway.StateQueued:
		return 0
	case spillway.StateRunning:
		return 1
	case spillway.StateRetrying:
		return 2
	case spillway.StateSucceeded, spillway.StateDead, spillway.StateExpired, spillway.StateCancelled, spillway.StateSuperseded:
		return 3
	}
	return -1
}

// MaxErrorLen bounds Record.LastError, as queue.MaxErrorLen bounds a dead
// letter's last error.
const MaxErrorLen = 1024

// Record is a job's status. Times are UTC; a zero time is omitted from the
// JSON.
type Record struct {
	ID    string         `json:"id"`
	Queue string         `json:"queue"`
	State spillway.State `json:"state"`
	// Attempts is the number of tries started so far (0 before the first).
	Attempts int `json:"attempts"`
	// LastError is the last failed try's error, on one line, at most
	// MaxErrorLen bytes. It is kept after a later try succeeds.
	LastError string `json:"last_error,omitempty"`
	// EnqueuedAt is when the admitter accepted the job.
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`
	// NotBefore is when the job may start: a queued job's start, a retrying
	// job's next try.
	NotBefore time.Time `json:"not_before,omitzero"`
	// StartedAt is when the latest try started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the job succeeded or died.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// UpdatedAt is when the step this record shows happened.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// BacklogSeq is a queued job's sequence in its queue's backlog stream,
	// as the admitter stored it: where a cancel finds it (0: the job was
	// admitted, or the admitter's record was lost).
	BacklogSeq uint64 `json:"backlog_seq,omitempty"`
	// Submitter is the fingerprint of the API key that submitted the
	// job (the job's spillway.HeaderSubmitter; "" without API keys).
	Submitter string `json:"submitter,omitempty"`
	// CancelledBy is the fingerprint of the key that cancelled the job.
	CancelledBy string `json:"cancelled_by,omitempty"`
	// SupersededBy is the newer job of the same debounce key that
	// superseded this one (supersede.go).
	SupersededBy string `json:"superseded_by,omitempty"`
}

// ValidateID accepts a job id as queue.NewJobID makes them: a UUIDv7 in
// canonical lower-case form, which is also a valid KV key. Anything else —
// a KV wildcard, a path, another UUID version — is refused with ErrInvalidID.
func ValidateID(id string) error {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		return fmt.Errorf("%w %q: want a lower-case UUIDv7", ErrInvalidID, id[:min(len(id), 64)])
	}
	return nil
}

func (r Record) validate() error {
	if err := ValidateID(r.ID); err != nil {
		return err
	}
	if rank(r.State) < 0 {
		return fmt.Errorf("jobstatus: job %s: unknown state %q", r.ID, r.State[:min(len(r.State), 32)])
	}
	return nil
}

// normalized is r as it is stored: times in UTC without a monotonic
// reading, the error on one line.
func (r Record) normalized() Record {
	for _, t := range []*time.Time{&r.EnqueuedAt, &r.NotBefore, &r.StartedAt, &r.FinishedAt, &r.UpdatedAt} {
		if !t.IsZero() {
			*t = t.UTC().Round(0)
		}
	}
	r.LastError = queue.OneLine(r.LastError, MaxErrorLen)
	return r
}

// merge applies update to cur, the stored record. An update that is behind
// cur — an earlier try, or an earlier step of the same try — is refused
// (false), so that a late report never undoes a later one; so is any
// update of a cancelled or superseded job, which never starts. Otherwise the
// update wins, and what it leaves zero is kept from cur: the enqueue time
// stays, a running job keeps its previous try's error. FinishedAt is never
// kept: only a final state has one.
func merge(cur, update Record) (Record, bool) {
	if cur.State == spillway.StateCancelled || cur.State == spillway.StateSuperseded {
		return cur, false
	}
	if update.Attempts < cur.Attempts || (update.Attempts == cur.Attempts && rank(update.State) < rank(cur.State)) {
		return cur, false
	}
	out := update
	if out.Queue == "" {
		out.Queue = cur.Queue
	}
	if out.LastError == "" {
		out.LastError = cur.LastError
	}
	if out.BacklogSeq == 0 {
		out.BacklogSeq = cur.BacklogSeq
	}
	if out.Submitter == "" {
		out.Submitter = cur.Submitter
	}
	keep := func(t *time.Time, old time.Time) {
		if t.IsZero() {
			*t = old
		}
	}
	keep(&out.EnqueuedAt, cur.EnqueuedAt)
	keep(&out.NotBefore, cur.NotBefore)
	keep(&out.StartedAt, cur.StartedAt)
	return out, true
}
