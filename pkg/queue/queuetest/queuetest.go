// Package queuetest starts a real NATS server with JetStream for one test:
// embedded in the test process, on a random port of 127.0.0.1, its store in
// the test's temporary directory, shut down in t.Cleanup. Tests never use a
// shared NATS server, so they run in parallel and may kill their own.
//
//	srv := queuetest.Start(t)
//	js := srv.JetStream(t) // a connection closed in t.Cleanup
//
// Restart stops the server and starts it again on the same port and store,
// so a test can check what JetStream kept across a crash. StartCluster
// starts a JetStream cluster of such servers.
//
// On a server of its own, StartQueue creates one queue's streams and a
// publisher, the start of most tests of pkg/queue and its stages; NewJob,
// Stored, Queue.PublishAll and RunWorker are what those tests do with it:
//
//	ctx, q := queuetest.StartQueue(t, queuetest.QueueConfig("mail"))
//	queuetest.RunWorker(t, q.JS, worker.WorkerConfig{Queue: q.Config}, handle)
//
// CheckDrainRate is the one rule for a measured drain rate, and
// StartExample is Start for a runnable Example, which has no testing.TB.
package queuetest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded NATS server with JetStream.
type Server struct {
	clients // Connect, JetStream: they survive Restart
	mu      sync.Mutex
	srv     *server.Server
	port    int
	dir     string
}

// Start starts a server for tb and shuts it down in tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{dir: tb.TempDir()}
	s.clients = clients{s.URL}
	s.start(tb, -1)
	tb.Cleanup(s.Shutdown)
	return s
}

func (s *Server) start(tb testing.TB, port int) {
	tb.Helper()
	srv, port, err := startServer(s.dir, port)
	if err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	s.mu.Lock()
	s.srv, s.port = srv, port
	s.mu.Unlock()
}

// startServer starts a server on port of 127.0.0.1 (-1: a random one)
// with its store in dir, and returns it and its port once it accepts
// connections.
func startServer(dir string, port int) (*server.Server, int, error) {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
		// The server's own limits stay at their defaults; tests that need
		// others set them on their streams.
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, 0, fmt.Errorf("configuring nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, 0, errors.New("nats-server on 127.0.0.1 did not accept connections within 10s")
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return nil, 0, fmt.Errorf("nats-server listens on %v, not TCP", srv.Addr())
	}
	return srv, addr.Port, nil
}

// URL is the client URL, nats://127.0.0.1:PORT.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://127.0.0.1:" + strconv.Itoa(s.port)
}

// StoreDir is where JetStream keeps its files.
func (s *Server) StoreDir() string { return s.dir }

// Shutdown stops the server and waits until it has stopped (a crash as far
// as clients are concerned; JetStream's file store stays).
func (s *Server) Shutdown() {
	stopServer(&s.mu, &s.srv)
}

// Restart shuts the server down and starts it again on the same port with
// the same store.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Shutdown()
	s.mu.Lock()
	port := s.port
	s.mu.Unlock()
	s.start(tb, port)
}

// String names the server in test logs.
func (s *Server) String() string { return fmt.Sprintf("nats-server %s (store %s)", s.URL(), s.dir) }

// stopServer takes the server *srv under mu, leaving nil, and shuts it
// down, waiting until it has stopped; a nil server is already stopped.
func stopServer(mu *sync.Mutex, srv **server.Server) {
	mu.Lock()
	s := *srv
	*srv = nil
	mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// clients makes connections to a Server or a Cluster.
type clients struct {
	url func() string // the client URLs, comma-separated
}

// Connect returns a client connection, closed in tb.Cleanup. It reconnects
// forever, so it survives a restart (of the server, or of the nodes one at
// a time).
func (c clients) Connect(tb testing.TB, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	urls := c.url()
	opts = append([]nats.Option{
		nats.Name(tb.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20 * time.Millisecond),
	}, opts...)
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		tb.Fatalf("queuetest: connecting to %s: %v", urls, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection.
func (c clients) JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(c.Connect(tb))
	if err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	return js
}

// Traffic is what the clients named name (nats.Name) sent and received, in
// messages, summed over their connections open now: the server's own count
// (Connz), so it takes in every JetStream API request, reply, ack and
// heartbeat of those clients.
func (s *Server) Traffic(name string) (in, out int64, conns int, err error) {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return 0, 0, 0, fmt.Errorf("queuetest: server is down")
	}
	cz, err := srv.Connz(&server.ConnzOptions{Limit: 4096})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("queuetest: connz: %w", err)
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			in, out, conns = in+c.InMsgs, out+c.OutMsgs, conns+1
		}
	}
	return in, out, conns, nil
}
