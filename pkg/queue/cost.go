package queue

// HeaderCharge is what settling a job's cost needs, stamped by the
// admitter on a job its tiers charged and carried with it through every
// stream: "<route>;<decision time, Unix ns>;<cost>;<tier key>[,<tier
// key>...]", the tier keys being the bucket keys of the tiers that took
// the job's units (a key decided at another time, by a Redis Cluster's
// shard, is followed by "@<its time, Unix ns>"). route says which admitter can settle it: "shared" for
// the shared store (any admitter), else the id of the admitter whose
// memory store decided (docs/design.md#cost-settled-from-the-answer).
const HeaderCharge = "Spillway-Charge"

// SetCostActual reports what the job really cost, in units: a Go handler
// calls it before it returns nil, as an HTTP or NATS handler's answer
// carries spillway.HeaderCostActual. After the success the worker settles
// the job's cost at n in every tier that charged it (the difference is
// given back, or taken). n must be 0 to 2^31 − 1; another value is logged
// and ignored. Without a call the job cost what it was submitted with.
func (j *Job) SetCostActual(n int64) {
	j.costActual, j.costReported = n, true
}

// CostActual reports what SetCostActual set, and whether it was called.
func (j *Job) CostActual() (n int64, ok bool) {
	return j.costActual, j.costReported
}
