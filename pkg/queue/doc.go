// Package queue is Spillway's durable, bounded FIFO on NATS JetStream: the
// streams of a queue, the publisher and the paced drainer (docs/jetstream-backlog.md).
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
// # Working
//
// A Worker (NewWorker, Run) runs one queue's jobs with a Handler, at most
// Concurrency at once, admitted and backlog jobs together. Admitted jobs are
// pulled from READY, never more than there are free handlers, kept alive
// with heartbeats (InProgress) while they run, and acked when the handler
// returns nil. A failed try is nak'd with the retry policy's delay; after
// the last try, or at once for retry.Permanent, the job is copied to DEAD
// with its headers, attempts, last error and reason, then acked. A READY job
// that is not due yet is held, with heartbeats, until it is: every delivery
// counts as a try.
//
// Backlog jobs drain fairly (docs/design.md#fair-drain). One worker
// process at a time leads a queue's drain, under a lease in the pacer
// bucket. It sees the backlog as flows — a key's jobs of one priority class,
// one subject each — holds a window of each flow's first jobs (headers
// only), and picks each start: the highest class with a due job (lower
// classes keep Fairness.MinShare of the starts), the flow by start-time
// fair queuing with the jobs' weights, and the flow's first due job (FIFO
// within key and class among due jobs; a job not due yet holds back
// nobody). It books the start from a Pacer and grants it through the
// queue's GRANTS stream; a worker with a free handler takes the grant,
// waits for the booked start and runs the handler from the backlog
// message, so the rate holds for handler starts, not only for moves.
// Workers that share a pacer's state share one leak rate whatever their
// number: a KVPacer keeps it in a JetStream key-value entry per queue
// (NATS alone), NewPacer over a redisbucket.Store in Redis, and a
// FailoverPacer paces in Redis and, while Redis fails, in JetStream. Every
// pacer's SetRate takes effect at the next booking. A YieldingPacer around
// any of them yields to the downstream: a handler's retry.Pushback pauses
// the leak of every worker and, with Config.Adaptive, cuts its rate, which
// climbs back as a function of the time (docs/design.md#pushback).
//
// A success deletes the backlog message and acks the grant; a failed try
// that may be retried moves the job to READY (after a pushback, back to
// the backlog) with its tries so far and the retry's not-before, under its
// backlog place as Nats-Msg-Id (so a crash between the move and the delete
// is deduplicated); the last failed try dead-letters it. A worker that dies
// mid-try leaves the grant unacked: after the ack wait another worker books
// it a new start and runs it again. A job older than Config.MaxAge, or a
// message that is not a job, goes to DEAD from the leader, taking no start.
// Event.Stream says where a job's message is: BACKLOG from its release
// (Released) to the end of its first try, READY for its retries.
//
// When Run's context ends the worker stops pulling, lets the lead go,
// hands back the grants it took and has not started, lets running
// handlers — admitted and backlog jobs alike — finish within the grace
// period and hands back what is left.
//
// Every move of a job between a queue's streams — a backlog job's retry
// to READY, a job to DEAD, a dead letter back to READY or the backlog — is
// one primitive (move.go): copy under a message id of its own with one
// header rule, wait for JetStream's acknowledgement, then ack or delete the
// source.
//
// # Cancel
//
// A queued job is cancelled by its caller winning a revision-checked write
// of the job's record against the worker's start (WorkerConfig.StartGate),
// then by CancelBacklogJob, which deletes its backlog message after checking
// that it is that job; a worker whose StartGate answers ErrJobCancelled
// deletes the message itself and runs nothing (docs/design.md#cancel).
//
// Inspect reads a queue's depth, capacity, fill, oldest age, in-flight jobs
// and estimated drain time from JetStream; BacklogKeys lists its deepest
// keys (depth, oldest age, weight, jobs of each priority class), and
// ReadKeyReleases the drain leader's per-key release counts. DeadLetters
// lists, replays and purges a queue's dead letters.
package queue
