package pace_test

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
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// Two workers' pacers over one key-value bucket share one leak rate: at
// 10/s, the starts they book are 100ms apart whoever books them.
func ExampleNewKVPacer() {
	js, stop := exampleJetStream()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := pace.OpenPacerBucket(ctx, js, 1)
	if err != nil {
		log.Fatal(err)
	}
	rate := bucket.Rate{Count: 10, Per: time.Second}
	a, err := pace.NewKVPacer(kv, "emails", rate)
	if err != nil {
		log.Fatal(err)
	}
	b, err := pace.NewKVPacer(kv, "emails", rate)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range []*pace.KVPacer{a, b, a} {
		wait, err := p.Reserve(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("start in", wait.Round(100*time.Millisecond))
	}
	// Output:
	// start in 0s
	// start in 100ms
	// start in 200ms
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
