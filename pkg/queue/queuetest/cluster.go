package queuetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of embedded servers in the test process:
// each node on its own random client and route ports of 127.0.0.1, with
// its store in the test's temporary directory. A node can be shut down
// and restarted on the same ports and store, so that a test can take the
// leader of a stream away and bring it back.
//
//	c := queuetest.StartCluster(t, 3)
//	js := c.JetStream(t) // knows every node's URL, reconnects forever
//	...
//	n := c.Node(info.Cluster.Leader)
//	n.Shutdown()
//	n.Restart(t)
//	c.WaitCurrent(t, js, stream, time.Minute)
type Cluster struct {
	clients // Connect, JetStream: to whichever node is up
	name    string
	nodes   []*Node
}

// Node is one server of a Cluster.
type Node struct {
	name      string
	cluster   string
	port      int
	routePort int
	routes    []*url.URL
	dir       string

	mu  sync.Mutex
	srv *server.Server
}

// StartCluster starts n nodes (3 for R3 streams), waits until JetStream
// has a meta leader, and shuts every node down in tb.Cleanup.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("queuetest: a cluster of %d nodes", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	c := &Cluster{name: "queuetest-" + strconv.Itoa(ports[0])}
	c.clients = clients{c.URL}
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: "127.0.0.1:" + strconv.Itoa(ports[n+i])})
	}
	for i := range n {
		c.nodes = append(c.nodes, &Node{
			name: "n" + strconv.Itoa(i+1), cluster: c.name,
			port: ports[i], routePort: ports[n+i], routes: routes, dir: tb.TempDir(),
		})
	}
	tb.Cleanup(c.Shutdown)
	// Started together: each node waits for the others' routes to form
	// the JetStream meta group.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, node := range c.nodes {
		wg.Go(func() { errs[i] = node.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	c.WaitMeta(tb, time.Minute)
	return c
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (n *Node) start() error {
	opts := &server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.dir,
		Cluster:    server.ClusterOpts{Name: n.cluster, Host: "127.0.0.1", Port: n.routePort},
		Routes:     n.routes,
		NoLog:      true,
		NoSigs:     true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("configuring node %s: %w", n.name, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("node %s (127.0.0.1:%d) did not accept connections within 30s", n.name, n.port)
	}
	n.mu.Lock()
	n.srv = srv
	n.mu.Unlock()
	return nil
}

// Nodes are the cluster's nodes, n1 to nN.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node is the node called name (as StreamInfo's Cluster.Leader names
// it), or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// URL is every node's client URL, comma-separated, as nats.Connect takes
// a server list.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.Shutdown)
	}
	wg.Wait()
}

// WaitMeta waits until every running node is in the JetStream cluster and
// one of them is its meta leader with every node's JetStream stats (so a
// new replicated stream can be placed), or fails tb after d.
func (c *Cluster) WaitMeta(tb testing.TB, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		var leaders, running, current, placeable int
		for _, n := range c.nodes {
			srv := n.server()
			if srv == nil {
				continue
			}
			running++
			if srv.JetStreamIsLeader() {
				leaders++
				// The peers the leader can place replicas on: it has
				// their JetStream stats. Until then a new R3 stream is
				// refused with "no suitable peers for placement".
				placeable = len(srv.JetStreamClusterPeers())
			}
			if srv.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && current == running && placeable == running {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("queuetest: cluster %s: no JetStream meta leader with every node current and placeable after %v (%d leaders, %d of %d current, %d placeable)", c.name, d, leaders, current, running, placeable)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitCurrent waits until stream and each of its consumers has a leader
// and every replica is current (online, caught up), or fails tb after d.
// Call it after Restart, before taking another node away, so that quorum
// holds.
func (c *Cluster) WaitCurrent(tb testing.TB, js jetstream.JetStream, stream string, d time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var err error
	for {
		if err = current(ctx, js, stream); err == nil {
			return
		}
		if ctx.Err() != nil {
			tb.Fatalf("queuetest: stream %s not current after %v: %v", stream, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// current reports why stream or one of its consumers is not fully
// replicated, or nil.
func current(ctx context.Context, js jetstream.JetStream, stream string) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(rctx, stream)
	if err != nil {
		return err
	}
	info := s.CachedInfo()
	if err := replicasCurrent("stream "+stream, info.Config.Replicas, info.Cluster); err != nil {
		return err
	}
	names := s.ConsumerNames(rctx)
	for name := range names.Name() {
		ci, err := s.Consumer(rctx, name)
		if err != nil {
			return err
		}
		cinfo := ci.CachedInfo()
		if err := replicasCurrent("consumer "+name, max(cinfo.Config.Replicas, info.Config.Replicas), cinfo.Cluster); err != nil {
			return err
		}
	}
	return names.Err()
}

func replicasCurrent(what string, replicas int, ci *jetstream.ClusterInfo) error {
	switch {
	case ci == nil:
		return fmt.Errorf("%s: no cluster info", what)
	case ci.Leader == "":
		return fmt.Errorf("%s: no leader", what)
	case len(ci.Replicas) < replicas-1:
		return fmt.Errorf("%s: %d followers, want %d", what, len(ci.Replicas), replicas-1)
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline || r.Lag != 0 {
			return fmt.Errorf("%s: replica %s not current (offline %v, lag %d)", what, r.Name, r.Offline, r.Lag)
		}
	}
	return nil
}

// Name is the node's server name: n1, n2, ...
func (n *Node) Name() string { return n.name }

// URL is the node's client URL.
func (n *Node) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// StoreDir is where the node's JetStream keeps its files.
func (n *Node) StoreDir() string { return n.dir }

// Running reports whether the node is up.
func (n *Node) Running() bool { return n.server() != nil }

func (n *Node) server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Shutdown stops the node and waits until it has stopped. As a real
// nats-server does on shutdown, it first steps down from what it leads.
func (n *Node) Shutdown() {
	stopServer(&n.mu, &n.srv)
}

// Restart starts a stopped node (or stops and starts a running one) on
// the same ports with the same store. It returns once the node accepts
// connections; WaitCurrent tells when it has caught up.
func (n *Node) Restart(tb testing.TB) {
	tb.Helper()
	n.Shutdown()
	if err := n.start(); err != nil {
		tb.Fatalf("queuetest: restarting: %v", err)
	}
}

// String names the node in test logs.
func (n *Node) String() string {
	return fmt.Sprintf("node %s %s (store %s)", n.name, n.URL(), n.dir)
}
