package spillway

import "time"

// Status is a submission's verdict, in SubmitReply.Status and the
// HeaderStatus of its answer.
type Status string

// Verdicts of a submission.
const (
	// Admitted: the job runs at once (a worker takes it from READY).
	Admitted Status = "admitted"
	// Queued: the job waits in the backlog and starts at the leak rate,
	// not before its NotBefore.
	Queued Status = "queued"
	// Rejected: nothing was taken; retry after RetryAfterMS.
	Rejected Status = "rejected"
	// Failed: the job was not taken for a reason other than a limit (bad
	// request, unknown queue, store or NATS unavailable); Error says why
	// and Type is its problem type.
	Failed Status = "error"
	// Cancelled: a cancel took the job out of the backlog; it never runs.
	Cancelled Status = "cancelled"
)

// Verdicts of a shadow tier (HeaderShadow): what it would have done had it
// enforced.
const (
	ShadowAdmitted    = "admitted"
	ShadowWouldQueue  = "would-queue"
	ShadowWouldReject = "would-reject"
)

// SubmitReply is the answer to one submission, on both doors. A queued
// job carries its backlog position and an estimated start; a rejected one
// carries RetryAfterMS.
type SubmitReply struct {
	ID             string     `json:"id,omitempty"`
	Queue          string     `json:"queue"`
	Status         Status     `json:"status"`
	NotBefore      *time.Time `json:"not_before,omitempty"`
	Position       int64      `json:"position,omitempty"`
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
	RetryAfterMS   int64      `json:"retry_after_ms,omitempty"`
	// Duplicate: this is the first answer to an earlier submission with the
	// same idempotency key; nothing new was taken.
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
	// Type is the problem type of an error (see Problem).
	Type string `json:"type,omitempty"`
}

// CancelReply is the NATS door's answer to a cancel: Status Cancelled, or
// Failed with Type and Error; State is the job's state when it was not
// queued (Type ProblemConflict).
type CancelReply struct {
	ID     string `json:"id,omitempty"`
	Queue  string `json:"queue"`
	Status Status `json:"status"`
	State  State  `json:"state,omitempty"`
	Error  string `json:"error,omitempty"`
	Type   string `json:"type,omitempty"`
}

// Media types of a batch's body on the HTTP door.
const (
	BatchJSON   = "application/json"     // one JSON array of jobs
	BatchNDJSON = "application/x-ndjson" // one job per line
)

// MaxBatchJobs bounds the jobs of one batch.
const MaxBatchJobs = 1000

// BatchJob is one job of a batch: the headers a single submission would
// send (its key headers, Idempotency-Key, Spillway-Cost,
// Spillway-Priority and the other Spillway-* request headers), and its
// payload, as text (Payload) or, for bytes that are not UTF-8 text, in
// standard base64 (PayloadBase64); at most one of the two.
type BatchJob struct {
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
}

// BatchReply is the answer to a batch: one BatchResult per job, in the
// batch's order. On the NATS door a batch that could not be read is
// answered with Status Failed, its problem Type, Error and Field (as
// jobs[i].field) and no Results; the HTTP door answers it with a problem
// document instead.
type BatchReply struct {
	Queue   string        `json:"queue"`
	Results []BatchResult `json:"results"`
	Status  Status        `json:"status,omitempty"`
	Type    string        `json:"type,omitempty"`
	Error   string        `json:"error,omitempty"`
	Field   string        `json:"field,omitempty"`
}

// BatchResult is one job's answer in a batch: the SubmitReply a single
// submission would get, and in Shadow the values its HeaderShadow would
// carry ("<tier> <verdict>" for each shadow tier that would not have
// admitted the job; none when every one would have).
type BatchResult struct {
	SubmitReply
	Shadow []string `json:"shadow,omitempty"`
}
