// Package worker is the runtime that runs a queue's jobs: admitted jobs
// from READY as fast as its handlers allow, and queued jobs from the
// BACKLOG at the queue's leak rate, in the order its fair scheduler picks.
// It takes jobs from the FIFO (pkg/queue), books backlog starts from a
// pacer (pkg/queue/pace) and moves a job between the queue's streams only
// through pkg/queue's move primitive.
//
// # Working
//
// A Worker (NewWorker, Run) runs one queue's jobs with a Handler, at most
// WorkerConfig.Concurrency at once, admitted and backlog jobs together, in
// one pool of handler slots. Admitted jobs are pulled from READY, never
// more than there are free handlers, kept alive with heartbeats
// (InProgress) while they run, and acked when the handler returns nil. A
// failed try is nak'd with the retry policy's delay; after the last try,
// or at once for retry.Permanent, the job is moved to DEAD with its
// headers, attempts, last error and reason. A READY job that is not due
// yet is held, with heartbeats, until it is: every delivery counts as a
// try.
//
// # The drain
//
// Backlog jobs drain fairly (docs/design.md#fair-drain). One worker
// process at a time leads a queue's drain, under a lease in the pacer
// bucket (internal/leadership). The leader sees the backlog as flows — a
// key's jobs of one priority class, one subject each — holds a window of
// each flow's first jobs (headers only), and picks each start: the highest
// class with a due job (lower classes keep Fairness.MinShare of the
// starts), the flow by start-time fair queuing with the jobs' weights, and
// the flow's first due job (FIFO within key and class among due jobs; a
// job not due yet holds back nobody). It books the start from the Pacer
// and grants it through the queue's GRANTS stream; a worker with a free
// handler takes the grant, waits for the booked start and runs the handler
// from the backlog message, so the rate holds for handler starts, not only
// for moves. A handler's retry.Pushback is told to a pacer that is a
// pace.Yielder, which pauses the leak of every worker; with the queue's
// pushback scope key it pauses only the job's key (pace.KeyPauses), whose
// flows the leader holds until the pause ends. The leader weighs each
// flow by the fairness weights in force (pace.Weights) when it picks it.
//
// A success deletes the backlog message and acks the grant; a failed try
// that may be retried moves the job to READY (after a pushback, back to
// the backlog) with its tries so far and the retry's not-before, under its
// backlog place as Nats-Msg-Id (so a crash between the move and the delete
// is deduplicated); the last failed try dead-letters it. A worker that
// dies mid-try leaves the grant unacked: after the ack wait another worker
// books it a new start and runs it again. A job older than
// queue.Config.MaxAge, or a message that is not a job, goes to DEAD from
// the leader, taking no start. Event.Stream says where a job's message is:
// BACKLOG from its release (Released) to the end of its first try, READY
// for its retries. The leader publishes its releases per key over the last
// minute (KeyReleases) for the operator's view.
//
// # Pause and cancel
//
// A paused queue (pace.SetPause) starts none of its jobs: every worker
// follows the pause state (pace.Pauser) and neither pulls nor takes grants
// until the resume. A queued job is cancelled by its caller winning a
// revision-checked write of the job's record against the worker's start
// (WorkerConfig.StartGate); a StartGate that answers ErrJobCancelled has
// the worker delete the job's backlog message and run nothing
// (docs/design.md#cancel).
//
// # Outcomes
//
// WorkerConfig.Outcome is handed a READY job's outcome (Succeeded or
// DeadLettered) before the job leaves READY, so that a job whose status is
// read from READY until its outcome (docs/design.md#reads) is always found
// in one of the two.
//
// # Stopping
//
// When Run's context ends the worker stops pulling, lets the lead go,
// hands back the grants it took and has not started, lets running
// handlers — admitted and backlog jobs alike — finish within the grace
// period and hands back what is left.
package worker
