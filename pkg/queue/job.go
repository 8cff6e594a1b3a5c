package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A job's message carries the job in its headers and its payload as the
// body, untouched. The headers a handler is sent too are pkg/spillway's
// (HeaderJobID, HeaderQueue, HeaderKey, HeaderCost, HeaderNotBefore,
// HeaderAttempt, HeaderPriority); these are the queue's own, read by the
// drain and the workers and sent to no handler.
const (
	// HeaderEnqueuedAt is when the admitter took the job, RFC 3339.
	HeaderEnqueuedAt = "Spillway-Enqueued-At"
	// HeaderWeight is the job's key's weight in the backlog's drain, set
	// by the admitter from the queue's fairness weights (absent: 1), so
	// that the drain need not match raw keys.
	HeaderWeight = "Spillway-Weight"
	// HeaderExpiresAt is when a backlog job that has not been released
	// yet is no longer wanted (the submission's spillway.HeaderMaxWait):
	// the drain dead-letters it with reason ReasonExpired instead of
	// starting it. Absent: it waits as long as the backlog keeps it.
	HeaderExpiresAt = "Spillway-Expires-At"
)

// MaxWeight bounds a key's weight in the drain.
const MaxWeight = 1000

// Job is one unit of work: an opaque payload and what Spillway knows of it.
type Job struct {
	// ID is a UUIDv7 (NewJobID); also the Nats-Msg-Id, so a retried
	// publish is stored once, and in READY the subject's last token, so
	// that the job is found by its id (ReadySubject).
	ID         string
	Queue      string
	Key        string // the client key; travels in a header, never in a subject
	Cost       int64  // units the job took from its limits (≥ 1)
	Payload    []byte
	EnqueuedAt time.Time
	NotBefore  time.Time // zero: may start at once
	Attempt    int       // tries so far (0 before the first)
	// Priority is the job's class in the backlog's drain (zero: Normal).
	Priority spillway.Priority
	// Weight is the job's key's share of the leak relative to other keys
	// (1 to MaxWeight; 0 means 1).
	Weight int
	// ExpiresAt is when the job, if still in the backlog, is no longer
	// wanted: it is dead-lettered (ReasonExpired) rather than started
	// after it (zero: never).
	ExpiresAt time.Time
	// Concurrency are the job's per-key concurrency bounds
	// (HeaderConcurrencyKey), stamped by the admitter.
	Concurrency []ConcurrencyKey
	// Header holds further headers to carry, such as W3C traceparent.
	// Spillway's own names and Nats-* are set by the publisher.
	Header nats.Header

	// What the handler reported the job really cost (SetCostActual).
	costActual   int64
	costReported bool
}

// NewJobID returns a new UUIDv7 for a job of queue q: unique, ordered by
// creation time, and tagged with its queue (JobIDQueueTag), so that a
// reader given the id alone knows which queue's READY to look in.
func NewJobID(q string) (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("queue: job id: %w", err)
	}
	tagID(&id, QueueTag(q))
	return id.String(), nil
}

// MaxJobIDs bounds NewJobIDs.
const MaxJobIDs = 1 << 10

// JobIDsPerGroup is how many ids of one NewJobIDs call share a group.
const JobIDsPerGroup = 64

// NewJobIDs returns n new UUIDv7s for jobs of queue q submitted together
// (n at most MaxJobIDs), unique, ordered and tagged as NewJobID's are, and
// in the order given. Each run of JobIDsPerGroup of them is a group: ids
// that share their first 10 bytes (a NewJobID of the group's), so that
// whoever reads them can tell which were made together, as job-status
// records do to keep the first records of a batch's queued jobs under a
// few keys (jobstatus). Byte 10 holds the id's place in its group in its
// top 6 bits; its last 2 bits and bytes 11 to 15 — 42 bits — are random
// for each id, so that knowing one id of a batch tells nothing of the
// others.
func NewJobIDs(q string, n int) ([]string, error) {
	if n < 0 || n > MaxJobIDs {
		return nil, fmt.Errorf("queue: %d job ids: want 0 to %d", n, MaxJobIDs)
	}
	ids := make([]string, n)
	tag := QueueTag(q)
	var base uuid.UUID
	for i := range ids {
		if i%JobIDsPerGroup == 0 {
			var err error
			if base, err = uuid.NewV7(); err != nil {
				return nil, fmt.Errorf("queue: job ids: %w", err)
			}
			tagID(&base, tag)
		}
		u := base
		if _, err := rand.Read(u[10:]); err != nil {
			return nil, fmt.Errorf("queue: job ids: %w", err)
		}
		u[10] = byte(i%JobIDsPerGroup)<<2 | u[10]&0x03
		ids[i] = u.String()
	}
	return ids, nil
}

// QueueTagBits is the size of a queue's tag in its jobs' ids.
const QueueTagBits = 14

// QueueTag is the tag that the ids of queue q's jobs carry: the first 14
// bits of the SHA-256 of its name. Different queues may share a tag (with
// many queues, some do): a tag narrows down the queues a job may be of, it
// does not name one.
func QueueTag(q string) uint16 {
	sum := sha256.Sum256([]byte(q))
	return (uint16(sum[0])<<8 | uint16(sum[1])) >> (16 - QueueTagBits)
}

// tagID writes tag into id: the 6 bits of byte 8 under the variant's 2, and
// byte 9 — random bits of a UUIDv7 (rand_b), inside the 10 bytes a group of
// ids shares, so the timestamp and rand_a that order ids are untouched.
func tagID(id *uuid.UUID, tag uint16) {
	id[8] = id[8]&0xc0 | byte(tag>>8)&0x3f
	id[9] = byte(tag)
}

// JobIDQueueTag is the queue tag (QueueTag) that job id carries; false if
// id is not a UUID.
func JobIDQueueTag(id string) (uint16, bool) {
	u, err := uuid.Parse(id)
	if err != nil {
		return 0, false
	}
	return uint16(u[8]&0x3f)<<8 | uint16(u[9]), true
}

// message builds the NATS message for j on destination d.
func (j *Job) message(d Destination) (*nats.Msg, error) {
	if err := spillway.ValidateQueueName(j.Queue); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if j.ID == "" {
		return nil, fmt.Errorf("%w: no id (use NewJobID)", ErrInvalidJob)
	}
	if j.Cost < 1 {
		return nil, fmt.Errorf("%w %s: cost %d: must be ≥ 1", ErrInvalidJob, j.ID, j.Cost)
	}
	if !j.Priority.Valid() {
		return nil, fmt.Errorf("%w %s: priority %d: want High, Normal or Low", ErrInvalidJob, j.ID, j.Priority)
	}
	if j.Weight < 0 || j.Weight > MaxWeight {
		return nil, fmt.Errorf("%w %s: weight %d: want 1 to %d (0 means 1)", ErrInvalidJob, j.ID, j.Weight, MaxWeight)
	}
	// One map sized for every header and one array for their values:
	// a job's message is built for each publish, so its dozen
	// allocations were a good part of the publisher's own cost.
	h := make(nats.Header, len(j.Header)+12)
	for k, vs := range j.Header {
		h[k] = append([]string(nil), vs...)
	}
	vals := make([]string, 0, 12)
	set := func(k, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[k] = vals[n-1 : n : n]
	}
	set(nats.MsgIdHdr, j.ID)
	set(spillway.HeaderJobID, j.ID)
	set(spillway.HeaderQueue, j.Queue)
	set(spillway.HeaderKey, j.Key)
	set(spillway.HeaderCost, strconv.FormatInt(j.Cost, 10))
	set(HeaderEnqueuedAt, j.EnqueuedAt.UTC().Format(time.RFC3339Nano))
	if !j.NotBefore.IsZero() {
		set(spillway.HeaderNotBefore, j.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	if !j.ExpiresAt.IsZero() {
		set(HeaderExpiresAt, j.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	set(spillway.HeaderAttempt, strconv.Itoa(j.Attempt))
	if j.Priority != spillway.Normal {
		set(spillway.HeaderPriority, j.Priority.String())
	}
	if j.Weight > 1 {
		set(HeaderWeight, strconv.Itoa(j.Weight))
	}
	for _, k := range j.Concurrency {
		h.Add(HeaderConcurrencyKey, k.String())
	}
	subject := classSubject(j.Queue, d, j.Priority, KeyToken(j.Key))
	if d == Ready {
		if !validIDToken(j.ID) {
			return nil, fmt.Errorf("%w %q: not a subject token: a READY job's subject ends with its id", ErrInvalidJob, j.ID)
		}
		subject = ReadySubject(j.Queue, j.ID)
	}
	m := &nats.Msg{Subject: subject, Header: h}
	m.Data = j.Payload
	return m, nil
}

// ParseJob reads a job back from a message's headers and body. The error
// names the header that is missing or malformed.
func ParseJob(h nats.Header, data []byte) (Job, error) {
	j := Job{ID: h.Get(spillway.HeaderJobID), Queue: h.Get(spillway.HeaderQueue), Key: h.Get(spillway.HeaderKey), Payload: data}
	if j.ID == "" {
		return Job{}, fmt.Errorf("%w: header %s is missing", ErrInvalidJob, spillway.HeaderJobID)
	}
	if err := spillway.ValidateQueueName(j.Queue); err != nil {
		return Job{}, fmt.Errorf("%w %s: header %s: %w", ErrInvalidJob, j.ID, spillway.HeaderQueue, err)
	}
	var err error
	if j.Cost, err = strconv.ParseInt(h.Get(spillway.HeaderCost), 10, 64); err != nil || j.Cost < 1 {
		return Job{}, fmt.Errorf("%w %s: header %s %q: want an integer ≥ 1", ErrInvalidJob, j.ID, spillway.HeaderCost, h.Get(spillway.HeaderCost))
	}
	if j.Attempt, err = strconv.Atoi(h.Get(spillway.HeaderAttempt)); err != nil || j.Attempt < 0 {
		return Job{}, fmt.Errorf("%w %s: header %s %q: want an integer ≥ 0", ErrInvalidJob, j.ID, spillway.HeaderAttempt, h.Get(spillway.HeaderAttempt))
	}
	if j.EnqueuedAt, err = time.Parse(time.RFC3339Nano, h.Get(HeaderEnqueuedAt)); err != nil {
		return Job{}, fmt.Errorf("%w %s: header %s %q: want an RFC 3339 time", ErrInvalidJob, j.ID, HeaderEnqueuedAt, h.Get(HeaderEnqueuedAt))
	}
	if nb := h.Get(spillway.HeaderNotBefore); nb != "" {
		if j.NotBefore, err = time.Parse(time.RFC3339Nano, nb); err != nil {
			return Job{}, fmt.Errorf("%w %s: header %s %q: want an RFC 3339 time", ErrInvalidJob, j.ID, spillway.HeaderNotBefore, nb)
		}
	}
	if ea := h.Get(HeaderExpiresAt); ea != "" {
		if j.ExpiresAt, err = time.Parse(time.RFC3339Nano, ea); err != nil {
			return Job{}, fmt.Errorf("%w %s: header %s %q: want an RFC 3339 time", ErrInvalidJob, j.ID, HeaderExpiresAt, ea)
		}
	}
	if j.Priority, err = spillway.ParsePriority(h.Get(spillway.HeaderPriority)); err != nil {
		return Job{}, fmt.Errorf("%w %s: header %s: %w", ErrInvalidJob, j.ID, spillway.HeaderPriority, err)
	}
	if w := h.Get(HeaderWeight); w != "" {
		if j.Weight, err = strconv.Atoi(w); err != nil || j.Weight < 1 || j.Weight > MaxWeight {
			return Job{}, fmt.Errorf("%w %s: header %s %q: want an integer from 1 to %d", ErrInvalidJob, j.ID, HeaderWeight, w, MaxWeight)
		}
	}
	for _, v := range h.Values(HeaderConcurrencyKey) {
		k, err := ParseConcurrencyKey(v)
		if err != nil {
			return Job{}, fmt.Errorf("job %s: %w", j.ID, err)
		}
		j.Concurrency = append(j.Concurrency, k)
	}
	for k, vs := range h {
		switch k {
		case HeaderConcurrencyKey, HeaderKeyMoves: // HeaderKeyMoves paces a worker's moves, not the job's
			continue
		case spillway.HeaderJobID, spillway.HeaderQueue, spillway.HeaderKey, spillway.HeaderCost, spillway.HeaderNotBefore,
			spillway.HeaderAttempt, spillway.HeaderPriority, HeaderEnqueuedAt, HeaderWeight, HeaderExpiresAt, nats.MsgIdHdr:
			continue
		}
		if j.Header == nil {
			j.Header = nats.Header{}
		}
		j.Header[k] = append([]string(nil), vs...)
	}
	return j, nil
}
