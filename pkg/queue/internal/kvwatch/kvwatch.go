// Package kvwatch follows entries of a JetStream key-value bucket, the way
// every worker follows the state its queue keeps there (its pause, its
// fairness weights, its keys' pauses and slots): one watch delivers the
// values at the start and then every change; a watch that fails is
// started again, after a backoff, until the caller's context ends.
package kvwatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
)

// Run follows the entries of kv whose keys match keys — one key, or a
// pattern such as "orders.*" or "orders.>" — until ctx ends. It calls
// apply with each entry delivered: the values at the start, then every
// change; an entry whose Operation is not jetstream.KeyValuePut was
// deleted, purged or expired. Calls of apply do not overlap.
//
// A failed watch is logged to log, as "watching <what> failed; watching
// again", and started again after loop.Backoff of the failures in a row;
// the new watch delivers the values at the start again. While the watch is
// broken, what apply made of the entries stands.
//
// known, if not nil, is closed once the values at the start were all
// delivered, or when Run returns if they never were.
func Run(ctx context.Context, kv jetstream.KeyValue, keys string, known chan<- struct{}, log *slog.Logger, what string, apply func(jetstream.KeyValueEntry)) {
	var once sync.Once
	told := func() {
		if known != nil {
			once.Do(func() { close(known) })
		}
	}
	defer told()
	for failures := 0; ctx.Err() == nil; {
		err := watch(ctx, kv, keys, told, apply)
		if ctx.Err() != nil {
			return
		}
		failures++
		log.Warn("watching "+what+" failed; watching again", "error", err, "failures", failures)
		_ = loop.Sleep(ctx, loop.Backoff(failures))
	}
}

// watch is one watch of keys, until ctx ends or the watch fails.
func watch(ctx context.Context, kv jetstream.KeyValue, keys string, known func(), apply func(jetstream.KeyValueEntry)) error {
	w, err := kv.Watch(ctx, keys)
	if err != nil {
		return fmt.Errorf("kvwatch: %s of bucket %s: %w", keys, kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("kvwatch: the watch of %s of bucket %s ended", keys, kv.Bucket())
			}
			if e == nil { // the values at the start are all delivered
				known()
				continue
			}
			apply(e)
		}
	}
}
