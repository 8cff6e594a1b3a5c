package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Errors callers branch on with errors.Is. Every *ProblemError matches
// the ones its status and problem type say: a backlog that is full is
// ErrQueueFull and ErrRejected.
var (
	// ErrRejected: a limit or the backlog refused the job (HTTP 429).
	// Nothing was taken; retry after ProblemError.RetryAfter. The more
	// precise reasons below match it too.
	ErrRejected = errors.New("client: rejected")
	// ErrRateLimited: the key's limit is full (problem rate-limited).
	ErrRateLimited = errors.New("client: rate limited")
	// ErrQueueFull: the backlog is full, the queue's or the key's share of
	// it (problem queue-full or key-full).
	ErrQueueFull = errors.New("client: backlog full")
	// ErrKeyFull: the key's share of the backlog is full (problem
	// key-full); it matches ErrQueueFull too.
	ErrKeyFull = errors.New("client: backlog full for this key")
	// ErrWaitTooLong: the job would start later than its max-wait allows
	// (problem wait-too-long).
	ErrWaitTooLong = errors.New("client: wait too long")

	// ErrBadRequest: the submission cannot be read (400): a bad cost,
	// priority, key header or schedule; ProblemError.Field names it.
	ErrBadRequest = errors.New("client: bad request")
	// ErrUnauthorized: no valid API key (401).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrForbidden: the key may not do this (403).
	ErrForbidden = errors.New("client: forbidden")
	// ErrNotFound: no such queue or job (404), or a job whose status
	// record is unknown or expired.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict: a cancel of a job that is not queued (409);
	// ProblemError.State is its state.
	ErrConflict = errors.New("client: conflict")
	// ErrIdempotencyMismatch: the idempotency key was used before, by
	// this caller, for another job (422); nothing was taken.
	ErrIdempotencyMismatch = errors.New("client: idempotency key reused for another job")
	// ErrTooLarge: the payload or the batch is larger than the admitter
	// takes (413).
	ErrTooLarge = errors.New("client: too large")
	// ErrUnavailable: the admitter cannot reach NATS or a fail-closed
	// store (503). The client retries it before returning it.
	ErrUnavailable = errors.New("client: unavailable")
	// ErrInternal: the admitter failed (500, or another 5xx).
	ErrInternal = errors.New("client: internal error")

	// ErrInvalidOption is wrapped by the error of a constructor or a
	// call given an option it cannot use.
	ErrInvalidOption = errors.New("client: invalid option")
)

// ProblemError is an answer of the admitter that is not what was asked
// for: its problem document (RFC 9457) on the HTTP door, or the error
// reply of the NATS door, which carries the same problem type. Status is
// the HTTP status the problem has on either door.
type ProblemError struct {
	// Status is the HTTP status: 400, 401, 404, 409, 413, 429, 503, ...
	Status int
	// Type is the problem type URI, such as
	// https://spillway.dev/problems/queue-full ("" when the answer had no
	// problem document); Reason is its last segment.
	Type   string
	Title  string
	Detail string
	// Field names the header or field at fault in a bad request.
	Field string
	Queue string
	// ID is the job a job's problem is about (a cancel, a status read).
	ID string
	// State is the job's state, when a cancel found it not queued.
	State spillway.State
	// RetryAfter is how long the admitter asks to wait before trying
	// again (0: it did not say).
	RetryAfter time.Duration
}

// Reason is the last segment of the problem type: "queue-full",
// "rate-limited", "bad-key"; "" without a type.
func (e *ProblemError) Reason() string {
	if e.Type == "" {
		return ""
	}
	return spillway.ProblemReason(e.Type)
}

func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %d %s", e.Status, http.StatusText(e.Status))
	if r := e.Reason(); r != "" {
		b.WriteString(" (" + r + ")")
	}
	switch {
	case e.Detail != "":
		b.WriteString(": " + e.Detail)
	case e.Title != "" && e.Title != http.StatusText(e.Status):
		b.WriteString(": " + e.Title)
	}
	if e.Field != "" {
		b.WriteString(" (field " + e.Field + ")")
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, "; retry after %v", e.RetryAfter)
	}
	return b.String()
}

// Is matches the sentinel errors of e's status and problem type.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrRateLimited:
		return e.Type == spillway.ProblemRateLimited
	case ErrQueueFull:
		return e.Type == spillway.ProblemQueueFull || e.Type == spillway.ProblemKeyFull
	case ErrKeyFull:
		return e.Type == spillway.ProblemKeyFull
	case ErrWaitTooLong:
		return e.Type == spillway.ProblemWaitTooLong
	case ErrRejected:
		return e.Status == http.StatusTooManyRequests
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrIdempotencyMismatch:
		return e.Type == spillway.ProblemIdempotencyMismatch
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case ErrInternal:
		return e.Status >= 500 && e.Status != http.StatusServiceUnavailable
	}
	return false
}

// problemError is the ProblemError of an HTTP problem document.
func problemError(status int, p spillway.Problem, h http.Header) *ProblemError {
	return &ProblemError{
		Status: status, Type: p.Type, Title: p.Title, Detail: p.Detail, Field: p.Field,
		Queue: p.Queue, ID: p.ID, State: p.State, RetryAfter: spillway.RetryAfter(h, p, time.Now()),
	}
}

// replyError is the ProblemError of a NATS door's error or rejected
// reply: the problem type decides the status.
func replyError(queue, id, typ, detail string, state spillway.State, retryAfterMS int64) *ProblemError {
	status := spillway.StatusOf(typ)
	if typ == "" {
		status = http.StatusInternalServerError
	}
	return &ProblemError{
		Status: status, Type: typ, Title: http.StatusText(status), Detail: detail, Queue: queue, ID: id, State: state,
		RetryAfter: time.Duration(max(0, retryAfterMS)) * time.Millisecond,
	}
}

// TransportError is an exchange that got no answer: the admitter could
// not be reached, the connection broke, no admitter listens on the NATS
// subject, or the attempt timed out. Err is the cause (errors.Is works
// through it: syscall.ECONNREFUSED, nats.ErrNoResponders,
// context.DeadlineExceeded). A submission may have been taken though its
// answer was lost; the client retries it with the same idempotency key.
type TransportError struct {
	// Op says what was attempted: "POST http://…/v1/queues/q/jobs",
	// "request spillway.submit.q".
	Op  string
	Err error
}

func (e *TransportError) Error() string { return "client: " + e.Op + ": " + e.Err.Error() }

func (e *TransportError) Unwrap() error { return e.Err }
