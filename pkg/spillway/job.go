package spillway

import "time"

// State is where a job is in its life (docs/design.md#reads).
type State string

// The states of a job; Final tells the ones it does not leave.
const (
	// StateAdmitted: accepted to run at once; waiting for a worker.
	StateAdmitted State = "admitted"
	// StateQueued: accepted into the backlog; starts at the leak rate, not
	// before Job.NotBefore.
	StateQueued State = "queued"
	// StateRunning: a handler is running it (try Job.Attempts).
	StateRunning State = "running"
	// StateRetrying: a try failed (Job.LastError); the next one is due at
	// Job.NotBefore.
	StateRetrying State = "retrying"
	// StateSucceeded: a handler finished it. Final.
	StateSucceeded State = "succeeded"
	// StateDead: it failed for good and is in the queue's dead-letter
	// stream. Final, unless an operator replays it.
	StateDead State = "dead"
	// StateExpired: it waited in the backlog past its expiry
	// (HeaderMaxWait) without being released, never ran, and is in the
	// queue's dead-letter stream. Final, unless an operator replays it.
	StateExpired State = "expired"
	// StateCancelled: a client cancelled it while it was queued; it never
	// ran. Final.
	StateCancelled State = "cancelled"
	// StateSuperseded: a newer job of its debounce key (HeaderDebounce)
	// replaced it while it waited; it never ran (Job.SupersededBy). Final.
	StateSuperseded State = "superseded"
)

// Final reports whether s is a state a job does not leave on its own:
// succeeded, dead, expired, cancelled or superseded.
func (s State) Final() bool {
	return s == StateSucceeded || s == StateDead || s == StateExpired || s == StateCancelled || s == StateSuperseded
}

// Job is a job's status record: what GET /v1/jobs/{id} and a request on
// JobPrefix+id answer. It is advisory: it may lag a step behind the job,
// never ahead. Times are UTC; a zero time is left out of the JSON.
type Job struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
	State State  `json:"state"`
	// Attempts is how many tries have started (0 before the first).
	Attempts int `json:"attempts"`
	// LastError is the last failed try's error, on one line. It is kept
	// after a later try succeeds.
	LastError string `json:"last_error,omitempty"`
	// EnqueuedAt is when the admitter took the job.
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`
	// NotBefore is when the job may start: a queued job's start, a
	// retrying job's next try.
	NotBefore time.Time `json:"not_before,omitzero"`
	// StartedAt is when the latest try started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the job reached a final state.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// UpdatedAt is when the step this record shows happened.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// BacklogSeq is a queued job's sequence in its queue's backlog
	// stream, where a cancel finds it (0: admitted, or unknown).
	BacklogSeq uint64 `json:"backlog_seq,omitempty"`
	// Submitter is the fingerprint of the API key the job was submitted
	// with (HeaderSubmitter; empty without API keys). Only its submitter
	// and admin keys can read or cancel the job.
	Submitter string `json:"submitter,omitempty"`
	// CancelledBy is the fingerprint of the key that cancelled the job
	// (empty without API keys, and for a job nobody cancelled).
	CancelledBy string `json:"cancelled_by,omitempty"`
	// SupersededBy is the id of the newer job of the same debounce key
	// that superseded this one (StateSuperseded).
	SupersededBy string `json:"superseded_by,omitempty"`
}
