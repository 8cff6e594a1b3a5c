package spillway

import "time"

// The weights endpoints (docs/design.md#fair-drain), admin only: GET
// /v1/queues/{queue}/weights lists a queue's fairness weight rules, the
// configuration's and the runtime's; GET, PUT and DELETE
// /v1/queues/{queue}/weights/{key} read a key's weight, and set and remove
// a runtime rule.

// Sources of a key's weight (KeyWeight.Source, WeightRule.Source).
const (
	WeightSourceDefault = "default" // no rule matches the key: weight 1
	WeightSourceConfig  = "config"  // a rule of backlog.fairness.weights
	WeightSourceRuntime = "runtime" // a rule set through the admin API
)

// WeightRequest is a PUT's body: {"weight": N}, 1 to 1000.
type WeightRequest struct {
	Weight int `json:"weight"`
}

// KeyWeight answers GET and PUT /v1/queues/{queue}/weights/{key}: the
// weight a key gets (a GET), or the rule set (a PUT).
type KeyWeight struct {
	Queue string `json:"queue"`
	// Key is the key asked (a GET), or the pattern set (a PUT).
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	// Source is default, config or runtime.
	Source string `json:"source"`
	// Pattern is the rule that applies: the key itself, a prefix such as
	// "tenant-*", or "*"; empty for the default.
	Pattern string `json:"pattern,omitempty"`
	// By and At: who set a runtime rule (an admin key's fingerprint) and
	// when.
	By string     `json:"by,omitempty"`
	At *time.Time `json:"at,omitempty"`
}

// WeightList answers GET /v1/queues/{queue}/weights: every rule of the
// queue, by pattern, each saying whether it is in force.
type WeightList struct {
	Queue string `json:"queue"`
	// Rules by pattern, then config before runtime; never null.
	Rules []WeightRule `json:"rules"`
}

// WeightRule is one rule of a WeightList.
type WeightRule struct {
	// Key is the pattern: a key, a prefix such as "tenant-*", or "*".
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	Source string `json:"source"`
	// InForce is false for a configuration rule that a runtime rule of
	// the same pattern replaces.
	InForce bool       `json:"in_force"`
	By      string     `json:"by,omitempty"`
	At      *time.Time `json:"at,omitempty"`
}
