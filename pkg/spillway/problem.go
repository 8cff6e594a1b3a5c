package spillway

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Problem is an RFC 9457 problem document (ProblemContentType): every
// error answer of the HTTP door, and the NATS door's answer when a job's
// record cannot be read (JobPrefix).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Extensions.
	Queue        string `json:"queue,omitempty"`
	ID           string `json:"id,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	Field        string `json:"field,omitempty"`
	// State is the job's state, when a cancel found it not queued
	// (ProblemConflict).
	State State `json:"state,omitempty"`
}

// ProblemContentType is the media type of Problem documents.
const ProblemContentType = "application/problem+json"

// Problem types: stable URIs clients may branch on, the same on both
// doors (docs/design.md#problem-types).
const (
	problemBase             = "https://spillway.dev/problems/"
	ProblemRateLimited      = problemBase + "rate-limited"       // 429: a limit's burst full
	ProblemQueueFull        = problemBase + "queue-full"         // 429: backlog full
	ProblemKeyFull          = problemBase + "key-full"           // 429: the key's share of the backlog full
	ProblemWaitTooLong      = problemBase + "wait-too-long"      // 429: the job would start after its Spillway-Max-Wait
	ProblemBadRequest       = problemBase + "bad-request"        // 400
	ProblemBadCost          = problemBase + "bad-cost"           // 400: Spillway-Cost not an integer ≥ 1 or above the limit
	ProblemBadKey           = problemBase + "bad-key"            // 400: a key header missing, too long or not valid
	ProblemBadPriority      = problemBase + "bad-priority"       // 400: Spillway-Priority not high, normal or low
	ProblemUnauthorized     = problemBase + "unauthorized"       // 401
	ProblemForbidden        = problemBase + "forbidden"          // 403: an admin endpoint without an admin key
	ProblemNotFound         = problemBase + "not-found"          // 404: unknown queue or job
	ProblemMethodNotAllowed = problemBase + "method-not-allowed" // 405: a known path with another method
	ProblemConflict         = problemBase + "conflict"           // 409: a cancel of a job that is not queued (its state says why)
	ProblemTooLarge         = problemBase + "too-large"          // 413
	// 422: the caller reused an idempotency key with another job (its
	// payload or a header that decides it differs); nothing was taken.
	ProblemIdempotencyMismatch = problemBase + "idempotency-mismatch"
	ProblemUnavailable         = problemBase + "unavailable" // 503: NATS or a fail-closed store unreachable
	ProblemInternal            = problemBase + "internal"    // 500
)

// ParseProblem decodes an answer's problem document; ok is false when
// contentType is not ProblemContentType or body does not decode.
func ParseProblem(contentType string, body []byte) (p Problem, ok bool) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != ProblemContentType || json.Unmarshal(body, &p) != nil {
		return Problem{}, false
	}
	return p, true
}

// ProblemReason is the last segment of a problem type URI: "queue-full"
// for ProblemQueueFull.
func ProblemReason(typ string) string { return typ[strings.LastIndexByte(typ, '/')+1:] }

// RetryAfter is how long an answer asks its client to wait: the problem's
// retry_after_ms, or else the Retry-After header (seconds or an HTTP date,
// counted from now); 0 when neither says.
func RetryAfter(h http.Header, p Problem, now time.Time) time.Duration {
	if p.RetryAfterMS > 0 {
		return time.Duration(p.RetryAfterMS) * time.Millisecond
	}
	v := strings.TrimSpace(h.Get(HeaderRetryAfter))
	if v == "" {
		return 0
	}
	if d, err := time.ParseDuration(v + "s"); err == nil && d >= 0 {
		return d
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}

// StatusOf is the HTTP status of a problem type: the status the HTTP door
// answers it with, and the one a client reads into a NATS door's error
// reply; 500 for a type it does not know.
func StatusOf(typ string) int {
	switch typ {
	case ProblemBadRequest, ProblemBadCost, ProblemBadKey, ProblemBadPriority:
		return http.StatusBadRequest
	case ProblemUnauthorized:
		return http.StatusUnauthorized
	case ProblemForbidden:
		return http.StatusForbidden
	case ProblemNotFound:
		return http.StatusNotFound
	case ProblemMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case ProblemConflict:
		return http.StatusConflict
	case ProblemTooLarge:
		return http.StatusRequestEntityTooLarge
	case ProblemIdempotencyMismatch:
		return http.StatusUnprocessableEntity
	case ProblemRateLimited, ProblemQueueFull, ProblemKeyFull, ProblemWaitTooLong:
		return http.StatusTooManyRequests
	case ProblemUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
