package client

import (
	"time"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Verdict is what the admitter did with a submission.
type Verdict string

// The verdicts of a submission.
const (
	// Admitted: the job runs at once (a worker takes it from READY).
	Admitted Verdict = "admitted"
	// Queued: the job waits in the backlog and starts at the leak rate,
	// not before Answer.NotBefore.
	Queued Verdict = "queued"
	// Rejected: nothing was taken; retry after Answer.RetryAfter.
	Rejected Verdict = "rejected"
)

// Answer is the admitter's verdict on one submission.
type Answer struct {
	// ID is the job's id (a UUIDv7): what Status, Wait and Cancel take.
	// Empty when the job was rejected.
	ID    string
	Queue string
	// Verdict is admitted, queued or rejected.
	Verdict Verdict
	// Duplicate: an earlier submission with the same idempotency key was
	// taken, and this is its answer; nothing new was taken. A client's own
	// retry after a lost answer comes back as a duplicate.
	Duplicate bool
	// IdempotencyKey is the key the submission was sent with (generated
	// unless WithIdempotencyKey gave one; empty when none was sent).
	IdempotencyKey string
	// NotBefore is when a queued job may start at the earliest; Position
	// its place among the backlog's jobs of its class (1: next);
	// EstimatedStart when it is expected to start at the current leak
	// rate. Zero for an admitted job.
	NotBefore      time.Time
	Position       int64
	EstimatedStart time.Time
	// RetryAfter is how long a rejected job should wait before it is
	// submitted again; Problem is the rejection's problem type
	// (https://spillway.dev/problems/queue-full, rate-limited, key-full,
	// wait-too-long).
	RetryAfter time.Duration
	Problem    string
	// Shadow holds one "<tier> would-queue" or "<tier> would-reject" per
	// shadow tier that would not have admitted the job.
	Shadow []string
	// Attempts is how many times the client sent the submission (1
	// unless it retried).
	Attempts int
}

// answerOf converts a door's reply. A reply of status error is not an
// answer: the caller turns it into an error first.
func answerOf(rep *spillway.SubmitReply, key string, shadow []string) *Answer {
	a := &Answer{
		ID: rep.ID, Queue: rep.Queue, Verdict: Verdict(rep.Status), Duplicate: rep.Duplicate, IdempotencyKey: key,
		Position: rep.Position, Problem: rep.Type, Shadow: shadow,
		RetryAfter: time.Duration(max(0, rep.RetryAfterMS)) * time.Millisecond,
	}
	if rep.NotBefore != nil {
		a.NotBefore = *rep.NotBefore
	}
	if rep.EstimatedStart != nil {
		a.EstimatedStart = *rep.EstimatedStart
	}
	if rep.Status != spillway.Rejected {
		a.Problem = ""
	}
	return a
}

// rejection is the error that goes with a rejected answer.
func (a *Answer) rejection() *ProblemError {
	e := replyError(a.Queue, "", a.Problem, "", "", a.RetryAfter.Milliseconds())
	e.Status, e.RetryAfter = 429, a.RetryAfter
	e.Title = "Rejected"
	return e
}

// State is where a job is in its life.
type State string

// The states of a job; Final tells which ones it does not leave.
const (
	StateAdmitted  State = "admitted"
	StateQueued    State = "queued"
	StateRunning   State = "running"
	StateRetrying  State = "retrying"
	StateSucceeded State = "succeeded"
	StateDead      State = "dead"
	StateExpired   State = "expired"
	StateCancelled State = "cancelled"
)

// Final reports whether s is a state a job does not leave on its own:
// succeeded, dead, expired or cancelled.
func (s State) Final() bool { return jobstatus.State(s).Final() }

// Job is a job's status record, as GET /v1/jobs/{id} answers it. It is
// advisory: it may lag a step behind the job, never ahead.
type Job struct {
	ID    string
	Queue string
	State State
	// Attempts is how many tries have started (0 before the first).
	Attempts int
	// LastError is the last failed try's error.
	LastError string
	// EnqueuedAt is when the admitter took the job; NotBefore when it may
	// start (a queued job) or try again (a retrying one); StartedAt when
	// its latest try started; FinishedAt when it reached a final state;
	// UpdatedAt when the record was last written. Zero when unknown.
	EnqueuedAt time.Time
	NotBefore  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	UpdatedAt  time.Time
}

func jobOf(r *jobstatus.Record) *Job {
	return &Job{
		ID: r.ID, Queue: r.Queue, State: State(r.State), Attempts: r.Attempts, LastError: r.LastError,
		EnqueuedAt: r.EnqueuedAt, NotBefore: r.NotBefore, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, UpdatedAt: r.UpdatedAt,
	}
}
