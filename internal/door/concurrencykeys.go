package door

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// readRunning reads how many jobs run under each key of queue q's
// concurrency entries (docs/design.md#per-key-concurrency), most first.
// The listing stands without them if they cannot be read; a queue no
// worker with concurrency entries ever ran has none.
func (h *httpDoor) readRunning(ctx context.Context, q string) []spillway.KeyConcurrency {
	kv, err := h.o.JS.KeyValue(ctx, keyslots.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	var running map[string]map[string]int
	if err == nil {
		running, err = keyslots.Running(ctx, kv, q)
	}
	if err != nil {
		h.o.Logger.Warn("door: reading the keys' running jobs", "queue", q, "err", err)
		return nil
	}
	var out []spillway.KeyConcurrency
	for name, keys := range running {
		for token, n := range keys {
			out = append(out, spillway.KeyConcurrency{Name: name, KeyHash: queue.KeyHashOfToken(token), Running: n})
		}
	}
	slices.SortFunc(out, func(a, b spillway.KeyConcurrency) int {
		return cmp.Or(cmp.Compare(b.Running, a.Running), cmp.Compare(a.Name, b.Name), cmp.Compare(a.KeyHash, b.KeyHash))
	})
	return out
}
