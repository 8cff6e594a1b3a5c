// Package admin is the operator's view of Spillway's queues: what a queue
// holds and how fast it drains, which keys fill its backlog, and the
// operator's hands on single jobs — cancel a queued job, list, replay and
// purge dead letters. It reads what the other stages write and moves jobs
// only through pkg/queue's move primitive, so it sits above them all: the
// FIFO (pkg/queue), the pacing (pkg/queue/pace) and the worker runtime
// (pkg/queue/worker).
//
// # Inspecting
//
// Inspect reads one queue's depth, capacity, fill, oldest age, in-flight
// jobs and estimated drain time from JetStream, so it answers the same
// whichever process asks. An Inspector reads every queue of a deployment
// in a few requests and shares the snapshot between its callers (what
// /metrics and GET /v1/queues show, docs/design.md#many-queues).
//
// # Keys
//
// BacklogKeys lists a backlog's deepest keys — depth, oldest age, weight
// and jobs of each priority class — from JetStream's per-subject counts
// and each key's first job; the keys show by KeyHash where the key itself
// should not.
//
// # Cancel
//
// A queued job is cancelled by its caller winning a revision-checked
// write of the job's record against the worker's start
// (worker.WorkerConfig.StartGate), then by CancelBacklogJob, which deletes
// its backlog message after checking that it is that job; a worker whose
// StartGate answers worker.ErrJobCancelled deletes the message itself and
// runs nothing (docs/design.md#cancel).
//
// # Dead letters
//
// DeadLetters lists a queue's dead letters by job id, replays them to
// READY or the backlog as new jobs (queue.ReplayMove: no tries, due at
// once, the same message id for every replay of one dead letter) and
// purges them.
package admin
