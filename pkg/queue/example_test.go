package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// Publishing to a queue's BACKLOG: a full backlog refuses the job with
// ErrQueueFull (or ErrKeyQueueFull for one key's share), and nothing is
// stored.
func ExamplePublisher_Publish_backlogFull() {
	js, stop := exampleJetStream()
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
		id, err := queue.NewJobID()
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

// exampleJetStream is a JetStream context on an embedded server, and what
// stops both.
func exampleJetStream() (jetstream.JetStream, func()) {
	url, stopServer := embeddedServer()
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	return js, func() { nc.Close(); stopServer() }
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
