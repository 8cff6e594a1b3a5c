package client

import (
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Answer is the admitter's verdict on one submission.
type Answer struct {
	// ID is the job's id (a UUIDv7): what Status, Wait and Cancel take.
	// Empty when the job was rejected.
	ID    string
	Queue string
	// Verdict is spillway.Admitted, spillway.Queued or
	// spillway.Rejected.
	Verdict spillway.Status
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
		ID: rep.ID, Queue: rep.Queue, Verdict: rep.Status, Duplicate: rep.Duplicate, IdempotencyKey: key,
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
