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
// Backlog jobs are held, headers only, by the workers, and started in the
// order they became due: never before their not-before, only when no due
// job of their key is ahead of them in the stream (per-key FIFO among due
// jobs, across processes; a job not due yet holds back nobody), and each at
// a start booked from a Pacer. Workers that share a pacer's state share one
// leak rate whatever their number: a KVPacer keeps it in a JetStream
// key-value entry per queue (NATS alone), NewPacer over a redisbucket.Store
// in Redis, and a FailoverPacer paces in Redis and, while Redis fails, in
// JetStream. Every pacer's SetRate takes effect at the next booking. A
// YieldingPacer around any of them yields to the downstream: a handler's
// retry.Pushback pauses the leak of every worker and, with Config.Adaptive,
// cuts its rate, which climbs back as a function of the time
// (docs/design.md#pushback). The rate
// holds for handler starts: at the booked time the worker that booked it
// runs the handler itself, in one of its handler slots, from the backlog
// message — the job does not pass through READY, where it could wait
// behind admitted jobs and then start in a crowd. A slot is needed only at
// the booked start: with every handler busy then, the booking goes unused
// and the job books again, taking a slot first; a worker whose handlers
// stay busy hands its due jobs back to workers that have free ones. The
// backlog message is kept with heartbeats while the handler runs and acked
// when it succeeds; a failed try that may be retried moves the job to READY
// with its tries so far and the retry's not-before, under its backlog place
// as Nats-Msg-Id (so a crash between the move and the ack is deduplicated),
// and acks it in the backlog; the last failed try dead-letters it. A worker
// that dies mid-try leaves the message unacked: after the ack wait another
// worker holds it and starts it again. A job running from the backlog is
// still in the stream: until it is settled, its key's later jobs held by
// other workers wait behind it (in its own worker they may start). A job
// older than Config.MaxAge goes to DEAD instead. Event.Stream says where a
// job's message is: BACKLOG from its release (Released) to the end of its
// first try, READY for its retries.
//
// When Run's context ends the worker stops pulling and starting backlog
// jobs, hands its held backlog jobs back, lets running handlers — admitted
// and backlog jobs alike — finish within the grace period and hands back
// what is left, each to the stream it came from.
//
// Every move of a job between a queue's streams — a backlog job's retry
// to READY, a job to DEAD, a dead letter back to READY or the backlog — is
// one primitive (move.go): copy under a message id of its own with one
// header rule, wait for JetStream's acknowledgement, then ack or delete the
// source.
//
// Inspect reads a queue's depth, capacity, fill, oldest age, in-flight jobs
// and estimated drain time from JetStream; BacklogKeys lists its deepest
// keys (depth, oldest age, weight, a sample of priority classes), and
// ReadKeyReleases the drain leader's per-key release counts. DeadLetters
// lists, replays and purges a queue's dead letters.
package queue
