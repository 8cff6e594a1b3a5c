package queue

import (
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Headers a dead letter carries besides the job's own.
const (
	// HeaderDeadReason says why the job is dead: "permanent error",
	// "attempts exhausted (5 of 5)", "expired in backlog", "invalid job",
	// or ReasonExpired.
	HeaderDeadReason = "Spillway-Dead-Reason"
	// HeaderLastError is the last try's error, on one line, at most
	// MaxErrorLen bytes.
	HeaderLastError = "Spillway-Last-Error"
	// HeaderDeadAt is when the job was moved, RFC 3339.
	HeaderDeadAt = "Spillway-Dead-At"
	// HeaderSourceStream and HeaderSourceSeq say where the job was.
	HeaderSourceStream = "Spillway-Source-Stream"
	HeaderSourceSeq    = "Spillway-Source-Seq"
)

// ReasonExpired is the dead reason of a backlog job that was not released
// before its expiry (Job.ExpiresAt, the submission's Spillway-Max-Wait);
// its last error says when it expired. It never ran.
const ReasonExpired = "expired"

// MaxErrorLen bounds HeaderLastError.
const MaxErrorLen = 1024

// DeadMove takes the job at src to DEAD after its last try (attempts
// tries; 0 for a job that never ran), for reason, with cause as its last
// error if not nil. Its message id is the job's place in the source stream
// (placeID).
func DeadMove(src Source, attempts int, reason string, cause error, now time.Time) Move {
	set := map[string]string{
		spillway.HeaderAttempt: strconv.Itoa(attempts),
		HeaderDeadReason:       reason,
		HeaderDeadAt:           now.UTC().Format(time.RFC3339Nano),
		HeaderSourceStream:     src.Stream,
		HeaderSourceSeq:        strconv.FormatUint(src.Seq, 10),
	}
	if cause != nil {
		set[HeaderLastError] = OneLine(cause.Error(), MaxErrorLen)
	}
	return Move{src: src, to: Dead, msgID: placeID(src.Stream, src.Seq), set: set}
}
