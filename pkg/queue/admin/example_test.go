package admin_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Inspect reads what a queue holds from JetStream, whichever process asks.
func ExampleInspect() {
	js, stop := queuetest.StartExample() // in production: jetstream.New(nc) on your NATS connection
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := queue.Config{Name: "reports", Capacity: 10, LeakRate: bucket.Rate{Count: 2, Per: time.Second}}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		log.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		id, err := queue.NewJobID("reports")
		if err != nil {
			log.Fatal(err)
		}
		if _, err := pub.Publish(ctx, queue.Backlog, &queue.Job{ID: id, Queue: "reports", Cost: 1, EnqueuedAt: time.Now()}); err != nil {
			log.Fatal(err)
		}
	}
	in, err := admin.Inspect(ctx, js, cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("backlog %d of %d (fill %.1f), drains in %v\n", in.Backlog, in.Capacity, in.Fill, in.EstimatedDrain)
	// Output: backlog 4 of 10 (fill 0.4), drains in 2s
}
