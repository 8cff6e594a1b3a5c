package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Publishing to a queue's BACKLOG: a full backlog refuses the job with
// ErrQueueFull (or ErrKeyQueueFull for one key's share), and nothing is
// stored.
func ExamplePublisher_Publish_backlogFull() {
	js, stop := queuetest.StartExample() // in production: jetstream.New(nc) on your NATS connection
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := queue.Config{Name: "reports", Capacity: 2, LeakRate: bucket.Rate{Count: 1, Per: time.Second}}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		log.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		id, err := queue.NewJobID("reports")
		if err != nil {
			log.Fatal(err)
		}
		_, err = pub.Publish(ctx, queue.Backlog, &queue.Job{ID: id, Queue: "reports", Cost: 1, EnqueuedAt: time.Now()})
		switch {
		case errors.Is(err, queue.ErrQueueFull):
			fmt.Printf("job %d: refused, the backlog is full\n", i+1)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("job %d: queued\n", i+1)
		}
	}
	// Output:
	// job 1: queued
	// job 2: queued
	// job 3: refused, the backlog is full
}
