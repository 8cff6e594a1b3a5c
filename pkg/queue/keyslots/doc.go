// Package keyslots bounds how many jobs of one key run at once across
// every worker of a queue (docs/design.md#per-key-concurrency).
//
// # The slots
//
// A queue's concurrency entry (its name) and a key (its token, a
// queue.KeyToken) have one entry in the key-value bucket Bucket,
// "<queue>.<name>.<token>", holding the jobs that run under it: each
// holder is a job id, the worker that runs it, and a beat the worker
// counts up while the job runs (Hold.Renew, every lease/3). A job takes a
// slot with a compare-and-set update that adds it, only while fewer than
// its key's max live holders are there; it gives the slot back the same
// way when its try ends, and the entry is deleted when its last holder
// leaves, so the bucket holds the keys that run jobs now (and, for a day,
// the entries of workers that died with nobody taking their keys again).
//
// # A worker that dies
//
// A holder is live unless this process has seen its beat unchanged for a
// whole lease (the queue's ack_wait) by its own clock: no clock is
// compared with another machine's, as the drain leader's lease is judged.
// An acquire that finds holders past their lease removes them in the
// update that adds its own. A holder with the acquiring job's own id is
// that job's earlier delivery — JetStream gave the job again because its
// worker stopped beating — and is replaced at once.
//
// # Following the holders
//
// A Watch follows a queue's entries with a key-value watch and keeps, per
// entry, its holders' job ids and when it last changed, so that the
// drain's leader holds back the keys at their max without reading the
// bucket (one message per write of an entry: a slot taken, given back or
// beaten).
package keyslots
