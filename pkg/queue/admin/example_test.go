package admin_test

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
	"github.com/spillway-dev/spillway/pkg/queue/admin"
)

// Inspect reads what a queue holds from JetStream, whichever process asks.
func ExampleInspect() {
	js, stop := exampleJetStream()
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
		id, err := queue.NewJobID()
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
