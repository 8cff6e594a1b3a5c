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
}

// ErrDuplicateKey is returned when two tiers of one decision share a key.
var ErrDuplicateKey = errors.New("bucket: two tiers share a key")

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
