package spillway

import (
	"errors"
	"fmt"
	"time"
)

// MaxQueueNameLen bounds a queue name: it appears in stream names,
// subjects, paths and metric labels.
const MaxQueueNameLen = 64

// ErrInvalidQueueName is wrapped by ValidateQueueName's error.
var ErrInvalidQueueName = errors.New("spillway: invalid queue name")

// ValidateQueueName accepts a queue name: 1 to MaxQueueNameLen ASCII
// letters, digits, '_' and '-', the characters that are safe in a
// JetStream stream name, a subject token, a URL path segment and a
// Prometheus label value alike, so that the name is each of them as it is.
func ValidateQueueName(name string) error {
	if name == "" || len(name) > MaxQueueNameLen {
		return fmt.Errorf("%w %.80q: want 1 to %d characters", ErrInvalidQueueName, name, MaxQueueNameLen)
	}
	for i, c := range name {
		if !isNameChar(c) {
			return fmt.Errorf("%w %.80q: character %q at byte %d; use ASCII letters, digits, '_' and '-'", ErrInvalidQueueName, name, c, i)
		}
	}
	return nil
}

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
	// Concurrency are the keys with jobs running under the queue's
	// per-key concurrency bounds, most running first (at most top of
	// them); absent when none run.
	Concurrency []KeyConcurrency `json:"concurrency,omitempty"`
}

// KeyConcurrency is how many jobs of one key run now under one of a
// queue's concurrency entries, across all workers (a crashed worker's
// count until its slots are taken over, within the ack wait).
type KeyConcurrency struct {
	// Name is the concurrency entry's name.
	Name string `json:"name"`
	// KeyHash names the key as KeyInfo's does.
	KeyHash string `json:"key_hash"`
	Running int    `json:"running"`
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

func isNameChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}
