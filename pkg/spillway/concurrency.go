package spillway

import "time"

// The concurrency endpoints (docs/design.md#per-key-concurrency), admin
// only: GET /v1/queues/{queue}/concurrency lists every concurrency entry
// with its overrides; GET, PUT and DELETE
// /v1/queues/{queue}/concurrency/{name}/keys/{key} read, set and remove a
// key's runtime override of an entry's max. Their Source is one of
// LimitSourceDefault, LimitSourceConfig and LimitSourceRuntime, as a
// limit's.

// ConcurrencyParams are a PUT's body: how many jobs of the key (or of
// each key of the prefix) run at once.
type ConcurrencyParams struct {
	Max int `json:"max"`
}

// KeyConcurrencyMax answers GET and PUT
// /v1/queues/{queue}/concurrency/{name}/keys/{key}: the max that key gets
// from the entry, and where it comes from.
type KeyConcurrencyMax struct {
	Queue string `json:"queue"`
	// Concurrency is the entry's name.
	Concurrency string `json:"concurrency"`
	// Key is the key asked (a GET), or the pattern set (a PUT).
	Key string `json:"key"`
	Max int    `json:"max"`
	// Source is default (the entry's own max), config or runtime.
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

// ConcurrencyList answers GET /v1/queues/{queue}/concurrency: every
// concurrency entry with its own max and its overrides.
type ConcurrencyList struct {
	Queue string `json:"queue"`
	// Entries in the configuration's order; never null.
	Entries []ConcurrencyEntry `json:"entries"`
}

// ConcurrencyEntry is one entry of a ConcurrencyList.
type ConcurrencyEntry struct {
	Name string `json:"name"`
	// KeyedBy is the entry's key source: global, ip or header:NAME.
	KeyedBy string `json:"keyed_by"`
	// Max is the entry's own max, for keys no override matches.
	Max int `json:"max"`
	// Overrides by pattern; a runtime override shadowing a config one of
	// the same pattern is listed once, as runtime. Never null.
	Overrides []ConcurrencyOverride `json:"overrides"`
}

// ConcurrencyOverride is one override of a concurrency entry.
type ConcurrencyOverride struct {
	// Key is the pattern: a key, or a prefix such as "tenant-*".
	Key    string     `json:"key"`
	Max    int        `json:"max"`
	Source string     `json:"source"`
	By     string     `json:"by,omitempty"`
	At     *time.Time `json:"at,omitempty"`
	Line   int        `json:"line,omitempty"`
}
