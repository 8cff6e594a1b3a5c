// Package queue is Spillway's durable, bounded FIFO on NATS JetStream: the
// streams of a queue, its subjects, the job, the publisher and the one
// primitive that moves a job between streams (docs/jetstream-backlog.md).
//
// # Subjects
//
// Queue names are validated (spillway.ValidateQueueName) so that they are
// safe in stream names, subjects, URLs and metric labels. A client key
// never appears in a subject: KeyToken turns it into a fixed 26-character
// token (128 bits of SHA-256, base32), so keys holding '.', '*', '>',
// spaces or invalid UTF-8 cannot change a subject, and per-key limits
// (JetStream's MaxMsgsPerSubject) apply to exactly one key.
//
// # Streams
//
// Each queue has three streams (EnsureStreams, idempotent): READY for
// admitted jobs, BACKLOG for queued ones and DEAD for jobs that failed for
// good, with subjects spillway.<backlog|dead>.<queue>.<key token> and, in
// READY, spillway.ready.<queue>.<job id> (ReadySubject): one subject per
// job, so that FindReady reads a job by its id alone, with a direct get
// that any replica answers.
// READY and BACKLOG use work-queue retention, so an ack removes a job. The
// backlog's bounds are JetStream's own (MaxMsgs, MaxMsgsPerSubject, Discard
// New per subject): a full backlog refuses the publish itself, without a
// check-then-publish race between admitters. docs/jetstream-backlog.md
// records what nats-server 2.9 and 2.15 were observed to do. A fourth
// stream, GRANTS (GrantsStreamName), carries the drain leader's grants to
// the workers (pkg/queue/worker).
//
// # Publishing
//
// A Job is the payload as the message body and its metadata as headers:
// the ones a handler is sent too, named in pkg/spillway
// (spillway.HeaderJobID, HeaderQueue, HeaderKey, HeaderCost,
// HeaderNotBefore, HeaderAttempt, HeaderPriority), the queue's own
// (HeaderEnqueuedAt, HeaderWeight, HeaderExpiresAt), and the producer's,
// such as traceparent. Its class is a spillway.Priority. Its id, a UUIDv7
// (NewJobID, NewJobIDs), is also the Nats-Msg-Id: a retried publish is
// stored once; and it carries its queue's 14-bit tag (QueueTag,
// JobIDQueueTag), so that a reader given the id alone knows which queue's
// READY to look in. Publisher.Publish sends
// asynchronously with a bounded number awaiting acknowledgement, and
// returns only once JetStream stored the job — or refused it, as
// ErrQueueFull or ErrKeyQueueFull.
//
// # Moves
//
// Every move of a job between a queue's streams — a backlog job's retry
// to READY, a job to DEAD, a dead letter back to READY or the backlog — is
// one primitive (Move, built by RetryMove, DeadMove or ReplayMove from the
// job's Source): copy under a message id of its own with one header rule,
// wait for JetStream's acknowledgement, then ack or delete the source
// (RemoveMsg). A dead letter carries the job's headers and payload, its
// attempts, last error and reason (HeaderDeadReason and the like).
//
// # Reading the backlog
//
// ScanBacklog and BacklogKeyHead read the jobs a backlog holds, for the
// admitter's Retry-After; ReadRoom says how full READY and the backlog
// are. KeyHash names a key where the key itself should not show.
//
// # The stages above
//
// The FIFO is the first stage of a job's way; each stage above it has a
// package of its own and imports only the ones below:
//
//   - pkg/queue/pace spaces the backlog's starts at the leak rate for every
//     worker at once: the pacers, the downstream's pushback, the pause.
//   - pkg/queue/worker runs a queue's jobs: READY as fast as its handlers
//     allow, the backlog through a drain leader's grants at the leak rate,
//     fairly between keys.
//   - pkg/queue/admin is the operator's view: what a queue holds, its
//     deepest keys, cancel, and the dead letters.
package queue
