// Package queue is Spillway's durable, bounded FIFO on NATS JetStream: the
// streams of a queue, the publisher and the paced drainer (DESIGN §2, §4).
//
// # Subjects
//
// Queue names are validated (ValidateQueueName) so that they are safe in
// stream names, subjects, URLs and metric labels. A client key never
// appears in a subject: KeyToken turns it into a fixed 26-character token
// (128 bits of SHA-256, base32), so keys holding '.', '*', '>', spaces or
// invalid UTF-8 cannot change a subject, and per-key limits (JetStream's
// MaxMsgsPerSubject) apply to exactly one key.
//
// # Streams
//
// Each queue has three streams (EnsureStreams, idempotent): READY for
// admitted jobs, BACKLOG for queued ones and DEAD for jobs that failed for
// good, with subjects spillway.<ready|backlog|dead>.<queue>.<key token>.
// READY and BACKLOG use work-queue retention, so an ack removes a job. The
// backlog's bounds are JetStream's own (MaxMsgs, MaxMsgsPerSubject, Discard
// New per subject): a full backlog refuses the publish itself, without a
// check-then-publish race between admitters. docs/jetstream-backlog.md
// records what nats-server 2.9 and 2.15 were observed to do.
//
// # Publishing
//
// A Job is the payload as the message body and its metadata as headers
// (Spillway-Job-Id, -Queue, -Key, -Cost, -Enqueued-At, -Not-Before,
// -Attempt, plus headers such as traceparent). Its id, a UUIDv7, is also the
// Nats-Msg-Id: a retried publish is stored once. Publisher.Publish sends
// asynchronously with a bounded number awaiting acknowledgement, and
// returns only once JetStream stored the job — or refused it, as
// ErrQueueFull or ErrKeyQueueFull.
//
// # Not yet here
//
// The paced drainer (leak rate across processes, not-before, retries and
// dead letters) and per-queue introspection are the next part of this
// package.
package queue
