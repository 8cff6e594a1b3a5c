package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A move takes a job from one stream of its queue to another: a failed
// backlog job to READY for its retry, a job that failed for good (or
// expired, or is not a job) to DEAD, a dead letter back to READY or the
// backlog, a READY job whose key is at its concurrency max to READY's
// tail (TailMove). Every move is the same three steps, here and nowhere else:
// copy the message to the destination under a message id of its own, wait
// for JetStream's acknowledgement, then settle the source (ack it, or
// delete it). A crash between the copy and the settle leaves the job in
// both streams; the copy's message id makes the next try of the same move
// store nothing new, so the job is never lost and stored twice only when
// the duplicate window has passed.
//
// A Move is built by RetryMove, DeadMove, ReplayMove or TailMove and made by Do; its
// zero value moves nothing.
type Move struct {
	src Source
	to  Destination
	// msgID is the copy's Nats-Msg-Id: the same for every try of this
	// move, and different from any other move's.
	msgID string
	// set are the Spillway headers the move sets, after the copy rule;
	// an empty value removes the header.
	set map[string]string
}

// Source is a job's message where a move finds it.
type Source struct {
	Queue string
	// Subject is the message's subject: a copy to the backlog or DEAD
	// keeps its key token (out of READY, it is the key header's).
	Subject string
	// Stream and Seq are its place (Seq 0 if unknown).
	Stream string
	Seq    uint64
	// Header and Data are the stored message: the copy's are taken from
	// them, and they are not changed.
	Header nats.Header
	Data   []byte
}

// deadLetterHeaders describe a job's last death. Every move drops them;
// a move to DEAD sets them afresh.
var deadLetterHeaders = [...]string{HeaderDeadReason, HeaderLastError, HeaderDeadAt, HeaderSourceStream, HeaderSourceSeq}

// isJetStreamHeader reports a header of JetStream's own (Nats-*, in any
// case).
func isJetStreamHeader(k string) bool {
	return len(k) >= len("Nats-") && strings.EqualFold(k[:len("Nats-")], "Nats-")
}

// message is the copy. Its headers follow one rule for every move:
//   - No JetStream header of the source is copied. They describe or
//     instruct about the source message, not the job: its Nats-Msg-Id
//     would make the destination drop the copy as a duplicate (or
//     collide with another move's), Nats-Expected-* would make it refuse
//     the copy, Nats-Rollup could purge the destination, Nats-TTL would
//     let JetStream delete the job without a trace, and Nats-Msg-Size,
//     Nats-Stream, Nats-Sequence, Nats-Subject and Nats-Time-Stamp
//     describe a stored message, not this one.
//   - The dead-letter headers (Spillway-Dead-Reason, -Last-Error,
//     -Dead-At, -Source-Stream, -Source-Seq) are dropped: they say why
//     and where the job last died, and only a move to DEAD sets them.
//   - Every other header is the job's and is copied: Spillway's job
//     headers (id, queue, key, cost, enqueued-at, not-before, attempt)
//     and the producer's own, such as traceparent.
//   - Then the move sets its Spillway headers (m.set) and its message id.
//
// In the backlog, the job's class (its spillway.HeaderPriority) picks the
// copy's subject, so a move there of a message whose class cannot be read
// is refused with ErrInvalidJob: filing it under the normal class would
// make it a job its producer did not send. DEAD has one subject per key
// whatever the class, and a move there does not read it: a message that is
// not a job still reaches DEAD. READY has one subject per job (ReadySubject),
// so a move there is refused with ErrInvalidJob when the message's
// spillway.HeaderJobID cannot be a subject token.
func (mv *Move) message() (*nats.Msg, error) {
	class := spillway.Normal
	if mv.to == Backlog {
		var err error
		if class, err = spillway.ParsePriority(mv.src.Header.Get(spillway.HeaderPriority)); err != nil {
			return nil, fmt.Errorf("%w %s: header %s: %w", ErrInvalidJob, mv.src.Header.Get(spillway.HeaderJobID), spillway.HeaderPriority, err)
		}
	}
	subject, err := mv.subject(class)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	for k, vs := range mv.src.Header {
		if !isJetStreamHeader(k) {
			m.Header[k] = append([]string(nil), vs...)
		}
	}
	for _, k := range deadLetterHeaders {
		m.Header.Del(k)
	}
	for k, v := range mv.set {
		if v == "" {
			m.Header.Del(k)
		} else {
			m.Header.Set(k, v)
		}
	}
	m.Header.Set(nats.MsgIdHdr, mv.msgID)
	m.Data = mv.src.Data
	return m, nil
}

// subject is the copy's subject. Into READY, the job's id is its last
// token. Into the backlog or DEAD, the key token: the source subject's own,
// since the backlog's and DEAD's subjects end with it, but for a job out
// of READY, whose subject ends with its id: its key header's KeyToken.
func (mv *Move) subject(class spillway.Priority) (string, error) {
	if mv.to == Ready {
		id := mv.src.Header.Get(spillway.HeaderJobID)
		if !validIDToken(id) {
			return "", fmt.Errorf("%w %q: header %s: not a subject token, and a READY job's subject ends with its id", ErrInvalidJob, id, spillway.HeaderJobID)
		}
		return ReadySubject(mv.src.Queue, id), nil
	}
	token := SubjectToken(mv.src.Subject)
	if strings.HasPrefix(mv.src.Subject, SubjectRoot+Ready.String()+".") {
		token = KeyToken(mv.src.Header.Get(spillway.HeaderKey))
	}
	return classSubject(mv.src.Queue, mv.to, class, token), nil
}

// Do stores the copy in the destination stream and, once JetStream has
// acknowledged it, settles the source with settle (an ack, or a delete:
// RemoveMsg). A nil PubAck means the copy was not stored and settle was
// not called: the job is where it was, and the error is the publish's as
// Publish returns it (ErrQueueFull, ErrKeyQueueFull or ErrReadyFull for a
// full destination), or wraps ErrInvalidJob for a move to the backlog of a
// message whose spillway.HeaderPriority cannot be read (its class picks
// its backlog subject). A PubAck with an error means the job was copied
// but settling the source failed: it is in both streams until the next try
// of the move, which stores nothing new within the duplicate window.
func (mv Move) Do(ctx context.Context, js jetstream.JetStream, settle func(context.Context) error) (*jetstream.PubAck, error) {
	m, err := mv.message()
	if err != nil {
		return nil, err
	}
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(StreamName(mv.src.Queue, mv.to)))
	if err != nil {
		return nil, publishError(mv.to, mv.src.Header.Get(spillway.HeaderJobID), err)
	}
	return ack, settle(ctx)
}

// placeID is the message id of a move keyed by the source's place: the
// same for every worker that moves the message, so a worker that dies
// after the copy and before the settle, and whose successor moves it
// again, stores it once. Not the job's id: a job replayed from DEAD, or
// retried again, within the duplicate window would be dropped as a
// duplicate of its earlier copy, and its source then settled: lost.
func placeID(stream string, seq uint64) string {
	return stream + ":" + strconv.FormatUint(seq, 10)
}

// RetryMove takes a failed backlog job to READY — or, after a pushback,
// back to the backlog — for its retry: with its tries so far and the
// retry's not-before. Its message id is the source's place (placeID).
func RetryMove(src Source, attempts int, notBefore time.Time, to Destination) Move {
	return Move{
		src: src, to: to,
		msgID: placeID(src.Stream, src.Seq),
		set: map[string]string{
			spillway.HeaderAttempt:   strconv.Itoa(attempts),
			spillway.HeaderNotBefore: notBefore.UTC().Format(time.RFC3339Nano),
		},
	}
}

// ReplayMove takes the dead letter src (its Seq the dead letter's) of job
// id back to READY or the backlog as a new job: no tries yet, due at once,
// enqueued now. Its message id is not the job id, which the destination
// may still hold in its duplicate window, and is the same for every replay
// of this dead letter.
func ReplayMove(src Source, to Destination, id string, now time.Time) Move {
	return Move{
		src: src, to: to,
		msgID: id + ":replay:" + strconv.FormatUint(src.Seq, 10),
		set: map[string]string{
			spillway.HeaderNotBefore: "", // due at once
			HeaderExpiresAt:          "", // an operator's replay runs it, whatever its producer's max-wait said
			spillway.HeaderAttempt:   "0",
			HeaderEnqueuedAt:         now.UTC().Format(time.RFC3339Nano),
		},
	}
}

// RemoveMsg removes a settled job's message from its stream — the settle
// of a move from the backlog, or a cancel; one removed already is fine.
// Whether it is, after a delete that failed, is read from the stream's
// leader when s is a Stream handle: a lagging replica could say either.
func RemoveMsg(ctx context.Context, s jetstream.Stream, seq uint64) error {
	err := s.DeleteMsg(ctx, seq)
	if err == nil {
		return nil
	}
	if _, gerr := leaderGetMsg(ctx, s, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}
