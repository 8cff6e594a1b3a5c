package admit

import (
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// RateLimit is what an answer says about the limits, for the HTTP door's
// RateLimit-Policy, RateLimit and X-RateLimit-* headers
// (draft-ietf-httpapi-ratelimit-headers). An idempotency record keeps
// it, so that a replay says what the first answer said.
type RateLimit struct {
	// Policies are the tiers the answer names: the one that bounds it,
	// or, when no tier decided (failure mode open), every tier of the
	// queue, the policies in force.
	Policies []RatePolicy `json:"policies"`
	// Counted: Remaining and Reset come from a store's decision. False
	// under failure mode open, where nothing counted the job and nothing
	// knows what remains.
	Counted bool `json:"counted,omitempty"`
	// Remaining is how many units the bounding tier has left, counting
	// those given back when the backlog refused the job.
	Remaining int64 `json:"remaining,omitempty"`
	// Reset is when the bounding tier is empty again, or, for a job the
	// tiers refused or left to the backlog, when a retry may succeed.
	Reset time.Duration `json:"reset_ns,omitempty"`
}

// RatePolicy is one tier's policy: Quota units per Window.
type RatePolicy struct {
	Name   string        `json:"name"`
	Quota  int64         `json:"quota"`
	Window time.Duration `json:"window_ns"`
}

func policyOf(l config.Limit) RatePolicy {
	return RatePolicy{Name: l.Name, Quota: l.Limit.Quota(), Window: l.Limit.PolicyWindow()}
}

// rateLimitOf is what answer a of queue q says about the limits; nil
// when no tier took part in it.
func rateLimitOf(q *config.Queue, a Answer) *RateLimit {
	if a.Source == FromOpen {
		rl := &RateLimit{Policies: make([]RatePolicy, len(q.Limits))}
		for i, l := range q.Limits {
			rl.Policies[i] = policyOf(l)
		}
		return rl
	}
	if !a.Limit.Valid() || a.Decision.Tier < 0 || a.Decision.Tier >= len(q.Limits) {
		return nil
	}
	// The answer's limit is the key's: its override's, if it has one.
	l := q.Limits[a.Decision.Tier]
	l.Limit = a.Limit
	quota := l.Limit.Quota()
	reset := a.Decision.ResetAfter
	if a.Decision.Verdict >= bucket.Excess && a.Decision.RetryAfter > 0 {
		reset = a.Decision.RetryAfter
	}
	return &RateLimit{
		Policies:  []RatePolicy{policyOf(l)},
		Counted:   true,
		Remaining: min(max(a.Decision.Remaining, 0)+a.Refunded, quota),
		Reset:     max(reset, 0),
	}
}

// after is rl as it stands d after it was answered, for a replay: the
// reset that much nearer. Remaining stays the first answer's, a lower
// bound: a replay takes nothing, and units may have leaked back since.
func (rl *RateLimit) after(d time.Duration) *RateLimit {
	if rl == nil {
		return nil
	}
	r := *rl
	if d > 0 {
		r.Reset = max(r.Reset-d, 0)
	}
	return &r
}
