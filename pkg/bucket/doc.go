// Package bucket decides whether a job is admitted now, queued until a
// not-before time, or refused, per client key, with the five algorithms of
// Spillway's admission contract (docs/design.md#algorithms in the repository). It uses the standard library
// only: the Redis store lives in the sub-package redisbucket, so a user of
// the algorithms does not link go-redis.
//
// # Algorithms
//
//   - LeakyBucket (the default; nginx limit_req): rate r, burst b, delay d.
//     A job of cost n leaves excess e' = max(0, e − Δt·r + 1) + n − 1 (a key
//     never seen: n − 1). e' > b: Rejected, nothing changes. e' ≤ d:
//     Admitted. Otherwise Queued with NotBefore = t + (e' − d)/r.
//   - TokenBucket: capacity b refilled at r, starting full; n tokens or
//     Excess.
//   - FixedWindow: at most L units per window W aligned to the Unix epoch.
//   - SlidingLog: at most L units admitted in (t − W, t].
//   - SlidingWindow: the counter approximation p·(W − elapsed) + (c + n)·W ≤
//     L·W, in integers.
//
// Excess is not a refusal: the caller queues the job in the backlog if the
// backlog has room for the key and rejects it otherwise.
//
// # Exactness
//
// Time is integer Unix nanoseconds and nothing accumulates floating-point
// error. A rate is kept in lowest terms (10/s is 1 unit per 100 ms), and a
// bucket's level is scaled by that period, so for every rate whose count
// divides its period the results agree with the formulas to the nanosecond;
// for other rates (3/s) a not-before is rounded up, never early. Limits are
// validated so that every scaled quantity stays below 2^53: the Redis store
// computes in Lua doubles and gets the same numbers.
//
// # Tiers
//
// A decision takes one to MaxTiers tiers, each a Limit and a key. The verdict
// is the worst (Rejected > Excess > Queued > Admitted), NotBefore the latest,
// and the tiers are updated all or nothing: if any tier rejects, no tier's
// state changes.
//
// # Refunds
//
// An Excess decision has consumed from its other tiers (those that admitted
// or queued the job: the bits of Decision.Consumed). If the backlog then
// refuses the job, the caller gives those units back with d.Refund(ctx), so
// that a refused job consumes from no tier (docs/design.md#algorithms in the
// repository). A Decision carries what its refund needs — the store that
// decided, the group, tiers and cost, the decision's time — as a
// golang.org/x/time/rate Reservation carries what its Cancel needs. A
// refund with no
// other decision of the key in between — at once or later — leaves every
// tier as if the job had never come: the next decisions are, to the
// nanosecond, those without it. Per algorithm, for a job of cost n, at the
// store's clock:
//
//   - LeakyBucket: the level u = e + 1 (the excess and the unit in service)
//     leaked to now, less n, never below empty: u ← max(0, u − n). An empty
//     level is e = −1, which e' = max(0, e − Δt·r + 1) + n − 1 reads as a
//     key never seen.
//   - TokenBucket: the tokens, refilled to now, plus n, at most b.
//   - FixedWindow: the count less n (never below 0) while the decision's
//     window is the current one; nothing later.
//   - SlidingWindow: the current or the previous count, whichever holds the
//     decision's window, less n (never below 0); nothing if it is older.
//   - SlidingLog: the job's own entry (stamped Decision.At, of cost n) leaves
//     the log if it is still in the window.
//
// A key the store has forgotten or evicted has nothing to give back. A
// refund never leaves a tier roomier than empty. If other jobs of the key
// were decided in between, the windows then hold exactly the other jobs'
// units, while a leaky or token bucket may end up to n units roomier than
// the other jobs alone would leave it (when, without the refunded job, it
// would have run empty, or full, meanwhile). Limit.Refund is the pure form.
//
// # Settles
//
// A job's handler may report what the job really cost: d.Settle(ctx,
// actual) settles the cost of decision d at actual units in its consumed
// tiers (Store.Settle gives the rule per algorithm). A smaller actual cost
// is a refund of the difference; a larger one is a forced consumption that
// never refuses, so that the key's later jobs wait for it: a token bucket
// may owe up to one burst, a leaky bucket's level may reach one quota
// beyond full, a window fills up to its limit. A job of cost c settled at
// once at actual ≤ c leaves its key as a job of that actual cost would
// have. A process that did not decide rebuilds what a settle needs with
// Rebind. Limit.Settle is the pure form.
//
// # Stores
//
// A Store keeps the state per key and decides at its own clock. Memory is
// the in-process store; redisbucket.Store shares state between processes.
// Both pass the conformance suite in buckettest, so they decide alike. For
// state you keep yourself, Limit.Decide is the pure algorithm with time as a
// parameter.
//
// # Writing a store
//
// A Store of your own (another database, a sharded cluster) must decide
// exactly as Memory does; the conformance suite checks that it does.
//
//   - Decide: check the request with CheckRequest, then, for every tier,
//     run its Limit's algorithm on the key's state at one instant t (Unix
//     nanoseconds) and fold the tiers' results with Combine, which gives
//     the verdict, NotBefore, Remaining and Consumed every store reports.
//     A denial is a Decision, not an error; errors are for bad requests and
//     for a store that cannot answer.
//   - Atomicity across tiers: the tiers of one decision are read and
//     written as one step, all or nothing. A Rejected decision changes no
//     tier; an Excess one writes only the tiers that admitted or queued
//     the job (its Consumed bits). No other decision of those keys may
//     interleave: Memory holds the locks of every shard involved at once;
//     redisbucket decides inside a Lua script, which Redis runs as one
//     step, with every key of a group in one hash slot (the group is the
//     Redis Cluster hash tag).
//   - Bind every Decision that Decide (and DecideBatch) returns to the
//     store and its request (Decision.Bind), so that Decision.Refund
//     reaches the store that decided.
//   - Refund: check it with CheckRefund, then give the units back per
//     algorithm as described under Refunds and in Store.Refund, to the
//     tiers of d.Request() that d.Consumed names, in one atomic step, at
//     the store's clock; a decision that consumed nothing needs no work,
//     and a key the store no longer holds has nothing to give back.
//   - Settle: check it with CheckSettle, then settle per algorithm as
//     Store.Settle describes, in one atomic step, at the store's clock.
//   - The clock: a store decides and refunds at its own clock, read once
//     per call, never at a time the caller passes. Stores shared between
//     processes need one clock for all of them (redisbucket reads Redis
//     TIME inside the script). For the suite the constructor must accept an
//     injected clock function and read it for every call (WithClock,
//     redisbucket.WithClock).
//   - Memory: state may be forgotten once it is back to empty (a key never
//     seen decides the same), and may be evicted under a bound; it must
//     never decide differently from the state it holds.
//
// Then run the conformance suite in a test of your store's package; it
// drives the clock itself and covers every algorithm, costs, tiers,
// concurrency, refunds and a randomised comparison with Limit.Decide:
//
//	func TestConformance(t *testing.T) {
//		buckettest.Exercise(t, func(t *testing.T, clock func() time.Time) bucket.Store {
//			return newMyStore(t, clock) // isolated: a fresh prefix or database
//		})
//	}
//
// buckettest.HotKey and buckettest.HotKeyCases check the store under a
// thousand goroutines on one key; run them under -race.
//
// # Which function to use
//
// Most callers build limits once with Spec.Build (from configuration
// strings) and call Store.Decide per job, and Decision.Refund for a job the
// backlog refuses after an Excess decision.
package bucket
