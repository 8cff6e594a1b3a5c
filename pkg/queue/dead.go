package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers a dead letter carries besides the job's own.
const (
	// HeaderDeadReason says why the job is dead: "permanent error",
	// "attempts exhausted (5 of 5)", "expired in backlog", "invalid job".
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

// publish stores the dead letter and waits for JetStream's acknowledgement.
// Its Nats-Msg-Id is the message's place in the source stream, so a worker
// that dies between this and its ack of the source message, and whose
// successor moves the job again, stores it once. Not the job's id: a job
// replayed from DEAD that dies again within the duplicate window would be
// dropped as a duplicate of its first dead letter — and acked, so lost.
func (d *deadLetter) publish(ctx context.Context, js jetstream.JetStream, now time.Time) error {
	token := d.subject[strings.LastIndexByte(d.subject, '.')+1:]
	m := nats.NewMsg("spillway." + Dead.String() + "." + d.queue + "." + token)
	for k, vs := range d.header {
		if strings.HasPrefix(k, "Nats-") {
			continue // the server's own (Nats-Expected-Stream would refuse the move)
		}
		m.Header[k] = append([]string(nil), vs...)
	}
	m.Header.Set(nats.MsgIdHdr, d.stream+":"+strconv.FormatUint(d.seq, 10))
	m.Header.Set(HeaderAttempt, strconv.Itoa(d.attempts))
	m.Header.Set(HeaderDeadReason, d.reason)
	if d.err != nil {
		m.Header.Set(HeaderLastError, OneLine(d.err.Error(), MaxErrorLen))
	}
	m.Header.Set(HeaderDeadAt, now.UTC().Format(time.RFC3339Nano))
	m.Header.Set(HeaderSourceStream, d.stream)
	m.Header.Set(HeaderSourceSeq, strconv.FormatUint(d.seq, 10))
	m.Data = d.data
	if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(StreamName(d.queue, Dead))); err != nil {
		return fmt.Errorf("queue: dead-lettering job %s (%s #%d) of queue %s: %w", d.header.Get(HeaderJobID), d.stream, d.seq, d.queue, err)
	}
	return nil
}
