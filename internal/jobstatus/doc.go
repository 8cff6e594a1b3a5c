// Package jobstatus keeps a record of each job's state — what
// GET /v1/jobs/{id} answers (docs/design.md#reads) — in a JetStream key-value bucket.
//
// # Records
//
// A Record says where a job is (its spillway.State: admitted, queued,
// running, succeeded, retrying, dead, expired or cancelled), how many
// tries it took, its last error and when things happened. Records live in 16
// buckets, spillway-jobs-00 to -15 (Open; BucketOf says which by the job
// id), one key per job id — but for the first records of a batch's jobs,
// which share a group record (group.go; GroupBucketOf says which bucket,
// usually not the job's) until the job's next write — and
// expire TTL after their last write (the buckets' TTL: JetStream's
// MaxAge), so they hold recent jobs only.
//
// # Admitted jobs
//
// An admitted job has no record until its outcome: the admitter stores the
// job in READY and nothing else, and the job's READY message is its status
// until a worker writes the outcome (Recorder.Outcome, before the job's
// ack). A Locator reads a job's status wherever it is: its record, else
// its READY message (found by its id: queue.FindReady), else its record
// once more.
//
// # Status is advisory
//
// The job itself lives in its JetStream streams, and nothing in Spillway
// decides anything from its record but a cancel (docs/design.md#cancel).
// A record may therefore lag, or miss a step: the FirstWriter drops first
// records rather than slow an answer down, the Recorder drops updates (but
// a READY job's outcome, written before its ack) rather than slow a worker
// down, and a write that fails is not retried.
// What it never does is go backwards (see Advance).
//
// # Cancel
//
// Store.Cancel and a worker starting a backlog job (Store.StartGate, as a
// worker.WorkerConfig.StartGate, before it calls the handler) race to
// create the job's claim, a key next to its record: JetStream creates a
// key once, so exactly one of the two wins, and neither reads first. A job
// is cancelled and never starts, or it starts and the cancel is refused.
// Get shows a queued record's claim; Cancel writes cancelled over the
// record too, and a cancelled record takes no later update.
//
// Store.Supersede is the same race, won for an admitter that stored a
// newer job of a debounced job's group (docs/design.md#debounce): the
// claim and then the record say superseded, and the start gate refuses
// the job as it refuses a cancelled one. A job whose start won first runs.
//
// # Writers
//
// The admitter's FirstWriter writes a queued job's first record as
// Store.Create would, asynchronously (CreateMsg): only if there is no
// record yet — a fast worker may have started the job first. A batch's
// queued jobs share their first records, up to 64 to a group record
// (FirstMsgs; group.go), which a job's own record, written by anyone
// after, takes precedence over. The workers' Recorder follows each job
// through its tries from the worker.Worker's events with Store.Advance,
// which merges an update into the stored record under a revision check, so
// that a late or reordered update — from another goroutine, another
// process, or a worker that was slow to report — never overwrites a record
// that is further along. Store.Put overwrites unconditionally, for tools
// that reset a record (a dead-letter replay).
package jobstatus
