package spillway

// HeaderCostActual is what a job really cost, in units (an integer from 0
// to 2^31 − 1), as its handler reports it: an HTTP handler's response
// header, a NATS handler's reply header. On a success the worker settles
// the job's cost in every tier that charged it: a smaller cost gives the
// difference back, a larger one takes it, and the key's later jobs wait
// for it (docs/design.md#cost-settled-from-the-answer).
const HeaderCostActual = "Spillway-Cost-Actual"
