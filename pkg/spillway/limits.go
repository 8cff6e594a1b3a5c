package spillway

import "time"

// The limits endpoints (docs/design.md#per-key-overrides), admin only:
// GET /v1/queues/{queue}/limits lists every tier's overrides; GET, PUT and
// DELETE /v1/queues/{queue}/limits/{tier}/keys/{key} read, set and remove
// a key's runtime override.

// Sources of a key's limit (KeyLimit.Source).
const (
	LimitSourceDefault = "default" // the tier's own parameters
	LimitSourceConfig  = "config"  // an override of the configuration file
	LimitSourceRuntime = "runtime" // an override set through the admin API
)

// LimitParams are a limit's parameters, named as in the configuration
// file: rate, burst, delay and nodelay for leaky_bucket and token_bucket,
// limit and window for the window algorithms. A PUT's body is one.
type LimitParams struct {
	Rate    string `json:"rate,omitempty"`
	Burst   int64  `json:"burst,omitempty"`
	Delay   int64  `json:"delay,omitempty"`
	NoDelay bool   `json:"nodelay,omitempty"`
	Limit   int64  `json:"limit,omitempty"`
	Window  string `json:"window,omitempty"`
}

// KeyLimit answers GET and PUT /v1/queues/{queue}/limits/{tier}/keys/{key}:
// the limit that key gets from the tier, and where it comes from.
type KeyLimit struct {
	Queue string `json:"queue"`
	// Tier is the tier's name; TierIndex its place in the queue's limits.
	Tier      string `json:"tier"`
	TierIndex int    `json:"tier_index"`
	// Key is the key asked (a GET), or the pattern set (a PUT).
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	LimitParams
	// Source is default, config or runtime.
	Source string `json:"source"`
	// Pattern is the override that applies: the key itself or a prefix
	// such as "tenant-*"; empty for the default.
	Pattern string `json:"pattern,omitempty"`
	// By and At: who set a runtime override (an admin key's fingerprint)
	// and when.
	By string     `json:"by,omitempty"`
	At *time.Time `json:"at,omitempty"`
	// Line is a config override's line in the configuration file.
	Line int `json:"line,omitempty"`
}

// LimitList answers GET /v1/queues/{queue}/limits: every tier with its
// own parameters and its overrides.
type LimitList struct {
	Queue string       `json:"queue"`
	Tiers []TierLimits `json:"tiers"`
}

// TierLimits is one tier of a LimitList.
type TierLimits struct {
	Tier  string `json:"tier"`
	Index int    `json:"index"`
	// KeyedBy is the tier's key source: global, ip or header:NAME.
	KeyedBy   string `json:"keyed_by"`
	Mode      string `json:"mode"`
	Algorithm string `json:"algorithm"`
	LimitParams
	// Overrides by pattern; never null.
	Overrides []LimitOverride `json:"overrides"`
}

// LimitOverride is one override of a tier.
type LimitOverride struct {
	// Key is the pattern: a key, or a prefix such as "tenant-*".
	Key string `json:"key"`
	LimitParams
	Source string     `json:"source"`
	By     string     `json:"by,omitempty"`
	At     *time.Time `json:"at,omitempty"`
	Line   int        `json:"line,omitempty"`
}
