// Package retry decides what happens to a job whose handler failed: try
// again after a delay, or give up and send it to the dead-letter stream. It
// uses the standard library only.
//
// # The schedule
//
// A Policy's schedule is exact and deterministic: the delay after the n-th
// failed attempt is Initial·2^(n−1), capped at Max (Policy.Delay). Jitter is
// kept apart from it: Policy.Next takes a random source and subtracts up to
// Jitter of the delay, so that jobs that failed together do not retry
// together, and tests can pass a seeded source.
//
// # Giving up
//
// A job is dead after MaxAttempts attempts, or at once when the handler's
// error is marked Permanent (a 4xx from a webhook, a payload that cannot be
// parsed). A handler that knows when to come back (HTTP 429 or 503 with
// Retry-After) wraps its error with After; the delay is then at least that,
// still bounded by Max. A handler whose downstream says it is overloaded
// (429, 503, a NATS reply "busy") marks its error with Pushback: the job
// retries as with After, and the worker pauses the queue's backlog leak.
//
// # Which function to use
//
// Workers call Policy.Next with the attempt that just failed and its error.
// Handlers call Permanent, After or Pushback on their errors; workers ask
// IsPushback.
package retry
