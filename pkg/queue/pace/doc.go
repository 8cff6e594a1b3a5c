// Package pace spaces the starts of a queue's backlog jobs at its leak
// rate, for every worker at once: the pacers, the downstream's pushback and
// the operator's pause.
//
// # Pacers
//
// A Pacer books the next start (Reserve) and says how long to wait for it.
// Workers that share a pacer's state share one leak rate whatever their
// number: a KVPacer keeps it in a JetStream key-value entry per queue
// (NATS alone, in PacerBucket), a StorePacer (NewPacer) in a bucket.Store
// such as Redis's, and a FailoverPacer paces in Redis and, while Redis
// fails, in JetStream, so that two chains never run side by side. Every
// pacer's SetRate takes effect at the next booking. Package pacetest is
// the one conformance suite all of them run.
//
// # Pushback
//
// A YieldingPacer around any of them yields to the downstream: a
// handler's retry.Pushback pauses the leak of every worker (Yield) and,
// when adaptive, cuts its rate, which climbs back as a function of the
// time (LeakState, docs/design.md#pushback). The state is one entry of the
// pacers' bucket, read by every worker's pacer.
//
// With the queue's pushback scope key (queue.PushbackKey) a pushback pauses
// only its job's key instead: KeyPauses writes the pause's end to an entry
// of KeyPushbackBucket, whose entries expire, and follows every worker's;
// with an adaptive leak it cuts that key's own rate too (PauseCut, kept in
// the same entry; KeyPauses.Rate), which the drain's leader keeps the
// key's starts within; the queue's rate is not cut.
//
// # Weights
//
// Admitters publish each queue's fairness weights to its WeightsKey entry
// (PublishWeights); every worker follows it (Weights), so that the drain
// weighs the jobs already waiting by the weights in force. The admin
// API's runtime rules are an entry of their own, RuntimeWeightsKey
// (SetRuntimeWeight, DeleteRuntimeWeight), that the workers follow too
// and merge over the configuration's (MergeWeights).
//
// # Pause
//
// An operator pauses a queue (SetPause): its workers start none of its
// jobs — neither READY's nor the backlog's — until it is resumed, while
// admission goes on and the backlog's bound holds. The state is one entry
// of the pacers' bucket, PauseKey, that every worker follows with a
// Pauser; nothing is lost, only held (docs/design.md#pause).
//
// # The pacers' bucket
//
// OpenPacerBucket makes sure of the bucket every queue's pacing entries
// live in: the KVPacer's chain, LeakState, PauseState, and the entries the
// worker runtime keeps there (the drain's lease and its releases per key).
package pace
