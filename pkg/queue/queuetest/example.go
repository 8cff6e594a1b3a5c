package queuetest

import (
	"fmt"
	"os"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartExample is Start for a runnable Example, which has no testing.TB:
// a server on a random port of 127.0.0.1 with its store in a new temporary
// directory, and a JetStream context on a connection to it. stop closes the
// connection, shuts the server down and removes the store. StartExample
// panics if the server does not start, as an Example has no other way to
// fail.
//
//	js, stop := queuetest.StartExample() // in production: jetstream.New(nc) on your NATS connection
//	defer stop()
func StartExample() (js jetstream.JetStream, stop func()) {
	dir, err := os.MkdirTemp("", "queuetest-example-")
	if err != nil {
		panic(fmt.Errorf("queuetest: %w", err))
	}
	srv, port, err := startServer(dir, -1)
	if err != nil {
		_ = os.RemoveAll(dir)
		panic(fmt.Errorf("queuetest: %w", err))
	}
	shutdown := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
	nc, err := nats.Connect("nats://127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		shutdown()
		panic(fmt.Errorf("queuetest: %w", err))
	}
	js, err = jetstream.New(nc)
	if err != nil {
		nc.Close()
		shutdown()
		panic(fmt.Errorf("queuetest: %w", err))
	}
	return js, func() { nc.Close(); shutdown() }
}
