// Package redisbucket is the Redis bucket.Store: admission state shared by
// every admitter, decided by one Lua script at Redis TIME.
//
// It lives apart from pkg/bucket so that users of the algorithms and the
// memory store do not link go-redis. The algorithms are those of pkg/bucket,
// transcribed into the script; the conformance suite (pkg/bucket/buckettest)
// holds both to the same answers, to the nanosecond.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisbucket.New(client)
//	...
//	d, err := store.Decide(ctx, "email", []bucket.Tier{{Key: "0:" + apiKey, Limit: limit}}, 1)
//
// New takes the narrow [Client] interface (redis.Scripter and Pipeline), so
// a *redis.Client, a *redis.ClusterClient, a *redis.Ring and the Sentinel
// failover clients all work. A [Store] is safe for
// concurrent use and holds nothing that needs closing.
//
// # Keys and hash tags
//
// A tier's state lives under
//
//	<prefix>{<group>:<hash>}:<algorithm>:<tier key>
//
// for example spillway:bucket:{email:fabcff6725782279}:leaky_bucket:0:alice
// ([Store.Key] computes it). The prefix defaults to [DefaultPrefix]
// ([WithPrefix] changes it; it may not hold braces). The hash tag is the
// group — the admitter passes the queue name — and 16 hex digits of the
// tier key's 64-bit FNV-1a hash, so that on a Redis Cluster the keys of one
// queue spread over all the slots, and so over all the shards. The layout is
// the same on one server and on a cluster. A group may not hold '{' or '}' ([ErrInvalidGroup]); tier
// keys are arbitrary bytes (after the tag, they do not affect the slot). The
// algorithm is part of the key, so a tier that changes algorithm starts
// afresh.
//
// # Cluster
//
// On one server (a *redis.Client) a decision is one script run over all its
// tiers: keys of different slots may share a script there. On a
// *redis.ClusterClient or a *redis.Ring ([WithSplitTiers] overrides the
// choice), the tiers of a decision are grouped by hash tag into parts, one
// script run each, all sent in one pipeline (the cluster client sends each
// shard its runs at once, so a decision still costs one round trip, to the
// slowest shard). Each part decides its tiers all-or-nothing as the one
// script does. When a part rejects the job, the parts that took their units
// give them back in a second pipeline of settle.lua runs at 0, at the time they
// decided, before the decision returns; so does a decision that fails in
// one part after others took units. The decision as a whole changes
// nothing, as on one server. The cost: a per-key tier's units are held for
// one more round trip when another tier rejects, so a concurrent decision
// of the same key may be refused in that instant (never admitted beyond its
// limit); a refund that fails leaves those units taken until they refill.
// Each shard reads its own TIME: the decision's time (Decision.At) is that
// of the part holding its first tier. [Store.Refund] sends one refund run
// per tag.
//
// [Store.DecideBatch] sends each run of jobs as one pipeline of one script
// per tag, the parts of one tag in job order. When job i is rejected after
// some of its parts took units, every part of the run's later jobs decided
// on top of those units: they are all given back and the next run starts
// at job i+1, so the batch decides exactly as jobs sent one after the
// other would.
//
// Every key gets a TTL whenever it is written: the time until its state is
// empty again (the Decision's ResetAfter for that tier), rounded up to the
// millisecond, plus one millisecond. A key whose state is empty again is
// deleted. A key that expired decides exactly as the state it held would
// have, so TTLs change no answer; they only stop idle clients from holding
// memory.
//
// The leaky and token buckets and the windows keep a short binary string per
// key (SET with PX); the sliding log keeps a list: a header holding the sum
// of its entries, then one entry per admitted job, oldest first. Its memory
// grows with the limit, as the algorithm's does.
//
// # Clock
//
// By default the script reads Redis TIME once per run, so all admitters share
// one clock however far their own clocks drift. [WithClock] injects a clock
// instead — `spillctl simulate --store redis` and the tests use it: the time
// of each decision (Unix seconds and nanoseconds) travels with it, the script
// never calls TIME, and TTLs get five extra minutes of grace, because the
// injected clock and the server's need not advance alike.
//
// A clock that steps back is handled as the Go algorithms handle it: no time
// has passed.
//
// # Scripts
//
// There are two scripts, embedded with go:embed: decide.lua for decisions
// and settle.lua for settles and refunds (a refund is the settle at 0),
// each sent as one chunk after lib.lua, the
// helpers both share (exact division, times as pairs, window starts, state
// loading, TIME). Limits travel as arguments (algorithm and parameters per
// tier), so a new limit needs no new script. Each is a redis.Script: a run
// on its own is Script.Run, EVALSHA and, when Redis answers NOSCRIPT (after
// SCRIPT FLUSH, a restart or a failover), the same run as EVAL, which also
// caches the script again. Runs sent together in a pipeline are EVALSHAs,
// and those answered NOSCRIPT go again as EVAL in a second pipeline. A
// NOSCRIPT run did not execute, so the retry applies nothing twice, and
// SCRIPT FLUSH never surfaces as an error.
//
// The scripts use only commands of Redis 3.2 and later (but LPOS, Redis
// 6.0.6, for a sliding log's settle at a cost other than 0), and the struct
// library every Redis embeds; they are tested against Redis 7.
//
// Arguments and replies are packed little-endian doubles (struct.pack in
// the script, encoding/binary in Go): one bulk string each way instead of a
// reply element per number.
//
// A decision is all-or-nothing: the script computes every tier before it
// writes any, and writes none if any tier rejects. The script returns each
// tier's verdict, not-before, remaining units, retry-after and reset-after;
// Go folds them with bucket.Combine, the one place tiers are combined for
// every store.
//
// # Refunds
//
// A decision's refund, d.Refund(ctx) (bucket.Decision.Refund, which calls
// [Store.Refund] of the store that made d: every decision the store returns
// carries its group, tiers and cost), gives back the units the decision
// took from its consumed tiers (bucket.Decision.Consumed) when the backlog
// refuses the job, with the semantics of bucket.Store.Refund. It is the
// settle of the decision at 0 (see Settles): one run of settle.lua over the
// consumed tiers' keys (on a cluster, one run per hash tag, in one pipeline) at
// Redis TIME (or the injected clock, which it then carries with the
// decision's time). The script reads every key before it writes any: a key
// holding foreign data fails the refund as a whole ([ErrForeignData]). A
// refunded state gets the TTL of the state it now holds, and a state empty
// again is deleted; a key that has expired is left alone. A sliding log's
// refund removes the job's own entry (its bytes are the decision time and
// the cost) with LREM from the tail and updates the header.
//
// Refunds are rare (the backlog was full), so they do not join the coalesced
// batches below: each is its own round trip. A decision with Consumed 0
// needs none, and Refund returns at once.
//
// # Settles
//
// [Store.Settle] settles a decision's cost at the actual cost its handler
// reported, with the semantics of bucket.Store.Settle: one run of
// settle.lua over the consumed tiers' keys (on a cluster, one run per hash
// tag), laid out as a refund with the actual cost after the tiers. A
// refund (a smaller cost) changes only keys with state; a charge (a larger
// one) takes a missing key as a key never seen. A sliding log's entry is
// found with LPOS from the tail (Redis ≥ 6.0.6) and replaced in place, or,
// at 0, removed with LREM as a refund removes it, and the header's sum
// moved. Like refunds, settles are their own
// round trips.
//
// # Coalescing
//
// Concurrent decisions share round trips. A caller that finds a free slot
// (at most [WithMaxInFlight] round trips run at once, default 2) sends its
// own decision at once, on its own goroutine, together with whatever
// decisions are waiting — so a lone caller pays no hand-off. Callers that
// find every slot busy queue. When a round trip ends, its sender takes the
// oldest waiting decisions (at most [WithMaxBatch], default 64) and hands
// them to the first of their callers, who sends them while the sender
// returns.
//
// A batch becomes one script run per group (on a cluster, per hash tag) and
// the runs of several groups go in one pipeline. Within a run, decisions are
// decided one after the other in arrival order, each all-or-nothing, exactly
// as if sent one by one.
//
// If a script run fails as a whole (Redis out of memory, say), every
// decision of the run gets the error, although those decided before the
// failure are applied: Redis does not roll a script back.
//
// A waiting caller whose context ends returns at once with an error wrapping
// ctx.Err(). If its decision was still queued, nothing happened; if it had
// already been taken into a batch, the decision may be applied (its units
// taken) although the caller got an error — the error says which. A caller
// sending a batch that carries other callers' decisions finishes the round
// trip (bounded by its own [WithTimeout] budget, which its wait in the queue
// has used up in part, and by the client's timeouts) before it looks at its
// own context.
//
// go-redis retries a command after some network errors (Options.MaxRetries,
// default 3). A decision is not idempotent: a retried run whose first
// attempt reached Redis is applied twice. Set MaxRetries to -1 if that
// matters more than riding out a dropped connection.
//
// # Exactness
//
// Lua numbers are doubles. pkg/bucket bounds every limit so that each scaled
// quantity (burst × period, limit × window, ...) stays below 2^53, where
// doubles hold integers exactly, and the script divides with a floor
// division that checks and corrects the quotient. Times are never counted in
// nanoseconds since 1970, which a double cannot hold exactly: a time is a
// pair (seconds, nanoseconds), an elapsed time is computed from two pairs
// only when it is below 9·10^15 ns (about 104 days; anything longer is
// "longer than any bucket needs"), and the start of a window aligned to the
// Unix epoch is found by reducing seconds modulo the window and then
// multiplying by ten, nine times, modulo the window (windows are at most 240
// hours, so every product stays below 2^53). The answers are therefore those
// of bucket.Limit.Decide, to the nanosecond.
package redisbucket
