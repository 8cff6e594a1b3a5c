// Package api holds the wire shapes of Spillway's front doors (docs/design.md#doors):
// the submit reply shared by the NATS and HTTP doors, problem documents,
// queue info, and the header and subject names. The admitter writes them;
// spillctl and tests read them.
package api

import (
	"strings"
	"time"
)

// Subjects and headers of the NATS front door.
const (
	// SubmitPrefix + queue name is the subject a producer sends a job to.
	SubmitPrefix = "spillway.submit."
	// CancelPrefix + queue name is the subject a client sends a cancel
	// to: the job id in the body or in HeaderJobID.
	CancelPrefix = "spillway.cancel."
	// HeaderJobID names the job to cancel on CancelPrefix subjects.
	HeaderJobID = "Spillway-Job-Id"
	// AdmitterGroup is the queue group every admitter subscribes in.
	AdmitterGroup = "spillway-admitters"

	HeaderStatus = "Spillway-Status"
	HeaderCost   = "Spillway-Cost"
	// HeaderPriority is a submission's class in the backlog's drain:
	// high, normal or low (absent: normal). It orders the drain only;
	// the limits decide the same whatever the class.
	HeaderPriority       = "Spillway-Priority"
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderMsgID          = "Nats-Msg-Id"
	// HeaderShadow is on an answer once per shadow tier that would not
	// have admitted the job: "<tier> would-queue" or "<tier>
	// would-reject" (docs/design.md#shadow-tiers).
	HeaderShadow = "Spillway-Shadow"
)

// Verdicts of a shadow tier: what it would have done had it enforced.
const (
	ShadowAdmitted    = "admitted"
	ShadowWouldQueue  = "would-queue"
	ShadowWouldReject = "would-reject"
)

// Timing headers of a submission, on both doors
// (docs/design.md#scheduled-jobs). HeaderNotBefore (an RFC 3339 time) or
// HeaderDelay (a Go duration) schedules a job: it starts no earlier,
// within the queue's backlog.max_delay. HeaderMaxWait (a Go duration)
// refuses a job that would start later than that (wait-too-long), and is
// the expiry of one that is queued.
const (
	HeaderNotBefore = "Spillway-Not-Before"
	HeaderDelay     = "Spillway-Delay"
	HeaderMaxWait   = "Spillway-Max-Wait"
)

// Status is a submission's verdict.
type Status string

// Verdicts of a submission.
const (
	Admitted Status = "admitted"
	Queued   Status = "queued"
	Rejected Status = "rejected"
	// Failed: the job was not taken for a reason other than a limit (bad
	// request, unknown queue, store or NATS unavailable); Error says why.
	Failed Status = "error"
	// Cancelled: a cancel took the job out of the backlog; it never runs.
	Cancelled Status = "cancelled"
)

// CancelReply is the NATS door's answer to a cancel: Status cancelled, or
// error with Type and Error; State is the job's state when it was not
// queued (Type ProblemConflict).
type CancelReply struct {
	ID     string `json:"id,omitempty"`
	Queue  string `json:"queue"`
	Status Status `json:"status"`
	State  string `json:"state,omitempty"`
	Error  string `json:"error,omitempty"`
	Type   string `json:"type,omitempty"`
}

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

// Problem is an RFC 9457 problem document (application/problem+json).
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
	State string `json:"state,omitempty"`
}

// ProblemContentType is the media type of Problem documents.
const ProblemContentType = "application/problem+json"

// Problem types: stable URIs clients may branch on.
const (
	problemBase             = "https://spillway.dev/problems/"
	ProblemRateLimited      = problemBase + "rate-limited"       // 429: limit's burst full
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
	ProblemUnavailable      = problemBase + "unavailable"        // 503: NATS or a fail-closed store unreachable
	ProblemInternal         = problemBase + "internal"           // 500
)

// QueueInfo is GET /v1/queues/{queue}.
type QueueInfo struct {
	Name           string  `json:"name"`
	Ready          int64   `json:"ready"`
	ReadyCapacity  int64   `json:"ready_capacity"`
	Depth          int64   `json:"depth"` // jobs in the backlog
	Capacity       int64   `json:"capacity"`
	PerKeyCapacity int64   `json:"per_key_capacity,omitempty"`
	Fill           float64 `json:"fill"`
	Dead           int64   `json:"dead"`
	LeakRate       string  `json:"leak_rate"`
	LeakPerSecond  float64 `json:"leak_per_second"`
	// LeakRateCurrent is the leak rate now, jobs per second: LeakPerSecond,
	// or less while an adaptive leak climbs back after a pushback
	// (docs/design.md#pushback).
	LeakRateCurrent float64 `json:"leak_rate_current"`
	// LeakPausedMS is how long the leak stays paused by a pushback (0: not
	// paused).
	LeakPausedMS     int64 `json:"leak_paused_ms,omitempty"`
	InFlight         int   `json:"in_flight"`
	MaxAckPending    int   `json:"max_ack_pending"`
	OldestAgeMS      int64 `json:"oldest_age_ms"`
	EstimatedDrainMS int64 `json:"estimated_drain_ms"`
	BacklogPullers   int   `json:"backlog_pullers"`
	ReadyPullers     int   `json:"ready_pullers"`
	// Paused: an operator paused the queue (docs/design.md#pause); its
	// workers start none of its jobs until it is resumed. PausedAt,
	// PausedBy and PauseReason say when, by which admin key and why.
	Paused      bool       `json:"paused"`
	PausedAt    *time.Time `json:"paused_at,omitempty"`
	PausedBy    string     `json:"paused_by,omitempty"`
	PauseReason string     `json:"pause_reason,omitempty"`
}

// PauseRequest is the optional body of POST /v1/queues/{queue}/pause.
type PauseRequest struct {
	Reason string `json:"reason,omitempty"`
}

// PauseReply answers POST /v1/queues/{queue}/pause and /resume: the
// queue's pause state after it. At is when it was paused or resumed; By
// the fingerprint of the admin key that did it.
type PauseReply struct {
	Queue  string    `json:"queue"`
	Paused bool      `json:"paused"`
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// QueueList is GET /v1/queues.
type QueueList struct {
	Queues []QueueInfo `json:"queues"`
}

// KeyList is GET /v1/queues/{queue}/keys: the keys with the deepest
// backlogs, the deepest first.
type KeyList struct {
	Queue string    `json:"queue"`
	Keys  []KeyInfo `json:"keys"`
	// TotalKeys is how many keys have jobs in the backlog.
	TotalKeys int `json:"total_keys"`
	// ReleasesAt and ReleasesWindowS are the window that release_share
	// covers, as the drain's leader last published it; absent when none
	// did.
	ReleasesAt      *time.Time `json:"releases_at,omitempty"`
	ReleasesWindowS int64      `json:"releases_window_s,omitempty"`
}

// KeyInfo is one key's part of a backlog.
type KeyInfo struct {
	// KeyHash names the key without showing it: the first 16 hex
	// characters of its SHA-256. Key is the key itself, only with
	// http.show_raw_keys.
	KeyHash string  `json:"key_hash"`
	Key     *string `json:"key,omitempty"`
	Depth   uint64  `json:"depth"`
	// OldestAgeMS is how long the key's first backlog job has waited.
	OldestAgeMS int64 `json:"oldest_age_ms"`
	// Weight is the key's fairness weight, from its first backlog job.
	Weight   int         `json:"weight"`
	Priority PriorityMix `json:"priority"`
	// ReleaseShare is the key's share of the backlog jobs released over
	// the releases window (0 to 1); absent when no leader published counts.
	ReleaseShare *float64 `json:"release_share,omitempty"`
}

// PriorityMix counts a key's backlog jobs of each priority class.
type PriorityMix struct {
	High   int `json:"high"`
	Normal int `json:"normal"`
	Low    int `json:"low"`
}

// IsToken reports whether s is an RFC 9110 token: what a header name, and
// a parameter such as a rate-limit policy's name, must be.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
