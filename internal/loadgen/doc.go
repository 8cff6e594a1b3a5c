// Package loadgen is the engine of spillctl bench: it submits jobs to a
// Target — an admitter's HTTP or NATS front door, or any function — and
// measures throughput, latency and verdicts.
//
// # Two ways to load
//
// A closed loop (Config.Callers) runs N callers, each sending its next job
// when the answer to its last one arrives: at most N jobs are ever
// outstanding, and a slow server slows the load down. Its latencies are
// service times; they say nothing of what a client arriving at a fixed rate
// would wait, because the callers stop asking while the server is slow
// ("coordinated omission").
//
// An open loop (Config.Rate) sends job i at start + i/rate whatever the
// answers, and measures each latency from that scheduled time, not from
// when the job was actually sent: a job held back — because the generator
// fell behind, or because Config.MaxOutstanding answers were awaited — is
// charged the time it was held. Jobs held back by the bound are counted as
// Report.Late; jobs still held back when the run ended, never sent, as
// Report.Unsent. Schedules are exact in integer nanoseconds: job i is due
// at start + ⌊i·Per/Count⌋ for a rate of Count per Per.
//
// # Measurement
//
// Every latency is recorded in a Histogram: log-linear buckets, quantiles
// within 0.4% of the exact value, exact min, max and count. Answers to jobs
// sent during Config.Warmup are counted apart and left out of every figure.
package loadgen
