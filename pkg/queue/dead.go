package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// deadLetter is one job on its way to the DEAD stream.
type deadLetter struct {
	queue    string
	subject  string // where it was: spillway.<ready|backlog>.<queue>.<token>
	stream   string
	seq      uint64
	header   nats.Header
	data     []byte
	attempts int
	reason   string
	err      error
}

// move is the dead letter's move to DEAD. Its message id is the job's
// place in the source stream (placeID).
func (d *deadLetter) move(now time.Time) move {
	set := map[string]string{
		HeaderAttempt:      strconv.Itoa(d.attempts),
		HeaderDeadReason:   d.reason,
		HeaderDeadAt:       now.UTC().Format(time.RFC3339Nano),
		HeaderSourceStream: d.stream,
		HeaderSourceSeq:    strconv.FormatUint(d.seq, 10),
	}
	if d.err != nil {
		set[HeaderLastError] = OneLine(d.err.Error(), MaxErrorLen)
	}
	return move{queue: d.queue, subject: d.subject, header: d.header, data: d.data, to: Dead, msgID: placeID(d.stream, d.seq), set: set}
}

// store moves the dead letter to DEAD, then settles its source with
// settle. A nil PubAck means nothing was stored and the source is
// untouched.
func (d *deadLetter) store(ctx context.Context, js jetstream.JetStream, now time.Time, settle func(context.Context) error) (*jetstream.PubAck, error) {
	mv := d.move(now)
	ack, err := mv.do(ctx, js, settle)
	if ack == nil {
		return nil, fmt.Errorf("queue: dead-lettering job %s (%s #%d) of queue %s: %w", d.header.Get(HeaderJobID), d.stream, d.seq, d.queue, err)
	}
	return ack, err
}
