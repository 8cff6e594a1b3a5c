package keyslots_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Two workers share a key's two slots: the third job waits until one is
// given back.
func Example() {
	js, stop := queuetest.StartExample() // in production: jetstream.New(nc) on your NATS connection
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := keyslots.OpenBucket(ctx, js, 1)
	if err != nil {
		log.Fatal(err)
	}
	tenant := []queue.ConcurrencyKey{{Name: "per-tenant", Max: 2, Token: queue.KeyToken("tenant-a")}}
	w1, w2 := keyslots.New(kv, "reports", 30*time.Second), keyslots.New(kv, "reports", 30*time.Second)
	h1, ok1, _ := w1.TryAcquire(ctx, "job-1", tenant)
	_, ok2, _ := w2.TryAcquire(ctx, "job-2", tenant)
	_, ok3, _ := w2.TryAcquire(ctx, "job-3", tenant)
	fmt.Println(ok1, ok2, ok3)
	if err := h1.Release(ctx); err != nil {
		log.Fatal(err)
	}
	_, ok3, _ = w2.TryAcquire(ctx, "job-3", tenant)
	fmt.Println(ok3)
	// Output:
	// true true false
	// true
}
