// Package overrides holds per-key overrides (docs/design.md#per-key-overrides):
// a tier's limit given other parameters for one client key, or for every
// key that starts with a prefix; and likewise a concurrency entry's max
// (docs/design.md#per-key-concurrency).
//
// # Patterns
//
// A Pattern is a key exactly ("tenant-a") or a prefix followed by one '*'
// ("tenant-*"; "*" alone is every key). A '*' anywhere else is refused,
// so a key that ends in '*' cannot be overridden exactly.
//
// # Resolution
//
// A Table answers which override applies to a key: the exact one if
// there is one, else the one with the longest matching prefix; for the
// same pattern, a runtime override replaces the configuration's.
//
// # Runtime overrides
//
// Those set through the admin API live in the JetStream KV bucket Bucket,
// one entry per Target (a queue's tier or concurrency entry) and pattern
// (entryKey is the one place its keys are spelled), whose value is a
// Record carrying the raw pattern, the parameters or the max, who set it
// and when. Every admitter follows the bucket with one Watcher, which
// delivers both kinds.
package overrides
