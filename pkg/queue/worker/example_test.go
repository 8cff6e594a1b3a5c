package worker_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Publish a job to a queue's READY stream and run it with a Worker. A
// worker's handler returns nil to ack the job, an error to retry it, or
// retry.Permanent(err) to dead-letter it.
func Example() {
	url, stop := embeddedServer() // in production: your NATS server's URL
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
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
	id, err := queue.NewJobID()
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

// embeddedServer starts a JetStream server on a random port with its store
// in a temporary directory (tests use queuetest.Start instead).
func embeddedServer() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "spillway-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server did not start")
	}
	return srv.ClientURL(), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}
