package jobstatus

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// State is where a job is in its life.
type State string

// The states of a job (docs/design.md#reads).
const (
	// Admitted: accepted to run at once; waiting for a worker.
	Admitted State = "admitted"
	// Queued: accepted into the backlog; starts at the leak rate, not
	// before Record.NotBefore.
	Queued State = "queued"
	// Running: a handler is running it (try Record.Attempts).
	Running State = "running"
	// Succeeded: a handler finished it. Final.
	Succeeded State = "succeeded"
	// Retrying: a try failed (Record.LastError); the next one is due at
	// Record.NotBefore.
	Retrying State = "retrying"
	// Dead: it failed for good and is in the queue's dead-letter stream.
	// Final, unless an operator replays it.
	Dead State = "dead"
	// Expired: it waited in the backlog past its expiry (the submission's
	// Spillway-Max-Wait) without being released, never ran, and is in the
	// queue's dead-letter stream with reason expired. Final, unless an
	// operator replays it.
	Expired State = "expired"
	// Cancelled: a client cancelled it while it was queued; it never ran
	// and is gone from the backlog (docs/design.md#cancel). Final.
	Cancelled State = "cancelled"
)

// Valid reports whether s is one of the eight states.
func (s State) Valid() bool { return s.rank() >= 0 }

// Final reports whether s is a state a job does not leave on its own.
func (s State) Final() bool { return s == Succeeded || s == Dead || s == Expired || s == Cancelled }

// rank orders the states of one try: a record moves to an equal or higher
// rank, or to a later try.
func (s State) rank() int {
	switch s {
	case Admitted, Queued:
		return 0
	case Running:
		return 1
	case Retrying:
		return 2
	case Succeeded, Dead, Expired, Cancelled:
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
	ID    string `json:"id"`
	Queue string `json:"queue"`
	State State  `json:"state"`
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
	if !r.State.Valid() {
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
// update of a cancelled job, which never starts. Otherwise the
// update wins, and what it leaves zero is kept from cur: the enqueue time
// stays, a running job keeps its previous try's error. FinishedAt is never
// kept: only a final state has one.
func merge(cur, update Record) (Record, bool) {
	if cur.State == Cancelled {
		return cur, false
	}
	if update.Attempts < cur.Attempts || (update.Attempts == cur.Attempts && update.State.rank() < cur.State.rank()) {
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
