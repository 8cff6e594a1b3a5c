package worker_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Publish a job to a queue's READY stream and run it with a Worker. A
// worker's handler returns nil to ack the job, an error to retry it, or
// retry.Permanent(err) to dead-letter it.
func Example() {
	js, stop := queuetest.StartExample() // in production: jetstream.New(nc) on your NATS connection
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The queue's streams; every worker of the queue shares its leak rate.
	rate, err := bucket.ParseRate("10/s")
	if err != nil {
		log.Fatal(err)
	}
	cfg := queue.Config{Name: "emails", LeakRate: rate}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		log.Fatal(err)
	}

	// Publish returns once JetStream has stored the job.
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		log.Fatal(err)
	}
	id, err := queue.NewJobID("emails")
	if err != nil {
		log.Fatal(err)
	}
	job := &queue.Job{ID: id, Queue: "emails", Key: "customer-42", Cost: 1, Payload: []byte("welcome mail"), EnqueuedAt: time.Now()}
	if _, err := pub.Publish(ctx, queue.Ready, job); err != nil {
		log.Fatal(err)
	}

	// Run a worker until the job is done, then stop it.
	done := make(chan struct{})
	w, err := worker.NewWorker(js, worker.WorkerConfig{Queue: cfg}, func(_ context.Context, j *queue.Job) error {
		fmt.Printf("sending %q for %s, try %d\n", j.Payload, j.Key, j.Attempt)
		close(done)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	<-done
	stopWorker()
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}
	// Output: sending "welcome mail" for customer-42, try 1
}
