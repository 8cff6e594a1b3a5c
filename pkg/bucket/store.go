package bucket

import (
	"context"
	"errors"
	"fmt"
)

// Tier is one limit applied to one key.
type Tier struct {
	// Key identifies the bucket within the decision's group. The caller
	// makes it unique per tier (the admitter uses "<tier index>:<client
	// key>"); two tiers of one decision must not share a key.
	Key string
	// Limit is the validated limit of the tier.
	Limit Limit
}

// Store decides jobs against the state it keeps per key. Every Store passes
// the conformance suite in buckettest, so all stores decide alike.
type Store interface {
	// Decide decides one job of the given cost (≥ 1) over all tiers at
	// the store's clock, all-or-nothing: if any tier rejects, no tier's
	// state changes. group scopes the keys (the admitter passes the queue
	// name); the Redis store uses it as the Redis Cluster hash tag.
	Decide(ctx context.Context, group string, tiers []Tier, cost int64) (Decision, error)

	// Refund gives back, at the store's clock, the units that decision d
	// took from each tier in d.Consumed (bit i: the request's tiers[i]), in
	// one atomic step. d is a Decision this store returned: it carries the
	// request (Decision.Request) — its group, tiers and cost. Most callers
	// call d.Refund(ctx), which calls this. The admitter refunds when the
	// backlog refuses a job that the tiers accepted or would have queued,
	// so that a refused job consumes from no tier. Per algorithm, for a
	// job of cost n:
	//
	//   - leaky_bucket: the level (excess plus the unit in service), leaked
	//     to now, less n, never below empty;
	//   - token_bucket: the tokens, refilled to now, plus n, at most the
	//     burst;
	//   - fixed_window: the count less n (never below 0) if d.At's window
	//     is still the current one, else nothing;
	//   - sliding_window: the current or the previous count, whichever holds
	//     d.At's window, less n (never below 0); nothing if it is older;
	//   - sliding_log: the job's own entry (stamped d.At, of cost n)
	//     leaves the log if it is still in the window.
	//
	// A refund right after the decision, with no other decision of the key
	// in between, leaves every tier as if the job had never been decided. A
	// key the store has forgotten or evicted has nothing to give back. A
	// decision with Consumed 0 (Rejected, or Excess on every tier) needs no
	// refund: Refund then returns nil at once. A Decision another store
	// made is refused with ErrInvalidRefund.
	Refund(ctx context.Context, d Decision) error

	// Settle settles, at the store's clock, the cost of decision d at
	// actual units (0 to MaxActualCost) in each tier of d.Consumed, in one
	// atomic step: the job's handler reported what the job really cost.
	// For δ = actual − cost < 0 it gives back −δ units exactly as Refund
	// gives back n; for δ > 0 it takes δ more, a forced consumption that
	// never refuses, so that the key's later jobs wait for it. Per
	// algorithm, for δ > 0:
	//
	//   - leaky_bucket: the level, leaked to now, plus δ, at most one quota
	//     beyond full (2·(burst+1) units);
	//   - token_bucket: the tokens, refilled to now, less δ, at least
	//     −burst: a debt the refill pays before the key's next job;
	//   - fixed_window: the count plus δ, at most the limit, if d.At's
	//     window is still the current one, else nothing;
	//   - sliding_window: the current or the previous count, whichever
	//     holds d.At's window, plus δ, at most the limit; nothing if older;
	//   - sliding_log: the job's own entry (stamped d.At, of cost n) takes
	//     actual units instead — leaves the log for 0, grows for more until
	//     the window's entries sum to the limit — if it is still in the
	//     window.
	//
	// A key without state takes a charge as a key never seen (a sliding
	// log's entry is gone with its log: nothing). Settle is not idempotent:
	// the caller settles a job once. An actual cost equal to the decided
	// one, or a decision that consumed nothing, returns nil at once.
	Settle(ctx context.Context, d Decision, actual int64) error
}

// ErrDuplicateKey is returned when two tiers of one decision share a key.
var ErrDuplicateKey = errors.New("bucket: two tiers share a key")

// ErrInvalidRefund is returned for a refund of a Decision that the store
// did not make (another store's, or one no store made), or whose decision
// consumed from a tier its request does not name.
var ErrInvalidRefund = errors.New("bucket: invalid refund")

// CheckRequest validates a decision's tiers and cost the way every store
// does: 1 to MaxTiers tiers with valid limits and distinct keys, cost ≥ 1.
// Stores outside this package call it before deciding.
func CheckRequest(tiers []Tier, cost int64) error {
	if err := checkRequest(tiers, cost); err != nil {
		return err
	}
	for i := 1; i < len(tiers); i++ {
		for j := range i {
			if tiers[i].Key == tiers[j].Key {
				return fmt.Errorf("%w: tiers %d and %d both use %.40q", ErrDuplicateKey, j, i, tiers[i].Key)
			}
		}
	}
	return nil
}

// CheckRefund validates a refund by store s the way every store does: d was
// made by s (Decision.Bind), its request's tiers and cost pass
// CheckRequest, and it consumed only from those tiers. Stores outside this
// package call it before refunding.
func CheckRefund(s Store, d Decision) error {
	if d.store == nil || d.store != s {
		return fmt.Errorf("%w: the decision was not made by this store", ErrInvalidRefund)
	}
	if err := CheckRequest(d.tiers, d.cost); err != nil {
		return err
	}
	if d.Consumed>>len(d.tiers) != 0 {
		return fmt.Errorf("%w: the decision consumed from tiers %08b, its request names %d tiers",
			ErrInvalidRefund, d.Consumed, len(d.tiers))
	}
	return nil
}
