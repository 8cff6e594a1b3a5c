package api

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"time"
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
	v := strings.TrimSpace(h.Get("Retry-After"))
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
	case ProblemRateLimited, ProblemQueueFull, ProblemKeyFull, ProblemWaitTooLong:
		return http.StatusTooManyRequests
	case ProblemUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
