package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterNodeTimeout is cluster-node-timeout: short, so that a killed
// master is marked failed quickly, but long enough for a loaded machine.
const clusterNodeTimeout = "2000"

// Cluster is a Redis Cluster of child redis-server processes, each a master
// owning an equal share of the slots, all on 127.0.0.1. Start one per test
// with [StartCluster], or share one among a test binary's tests with
// [SharedCluster]. Its methods are safe for concurrent use.
type Cluster struct {
	// Masters are the nodes, in slot order: Masters[0] owns the lowest
	// slots.
	Masters []*Server
	dir     string // removed by Stop when the cluster made it
	ownDir  bool
}

// StartCluster starts a cluster of masters nodes (3 when masters ≤ 0) for
// tb, assigns the slots, joins the nodes and waits until every node reports
// cluster_state:ok and knows every other. The processes are killed in
// tb.Cleanup. REDIS_URL is ignored: a cluster is always this test's own.
// Options other than WithArgs and WithStartTimeout are ignored.
func StartCluster(tb testing.TB, masters int, opts ...Option) *Cluster {
	tb.Helper()
	o := newOptions(opts)
	bin := findBinary(tb, o)
	c, err := newCluster(bin, tb.TempDir(), false, masters, o)
	if c != nil {
		tb.Cleanup(func() {
			c.Stop()
			if tb.Failed() {
				for i, m := range c.Masters {
					tb.Logf("redistest: tail of cluster node %d's log %s:\n%s", i, m.currentLog(), m.logTail(10))
				}
			}
		})
	}
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return c
}

var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// SharedCluster returns the test binary's one 3-master cluster, started by
// the first call: the tests of a package share it (and its startup time),
// so each must keep its keys under its own [KeyPrefix] and must not kill,
// flush or reconfigure it (use StartCluster for that). It outlives every
// test: call [StopShared] from TestMain after m.Run.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	shared.once.Do(func() {
		o := newOptions(nil)
		bin, err := lookupBinary(o)
		if err != nil {
			shared.err = err
			return
		}
		dir, err := os.MkdirTemp("", "redistest-cluster-")
		if err != nil {
			shared.err = err
			return
		}
		shared.cluster, shared.err = newCluster(bin, dir, true, 3, o)
		if shared.err != nil && shared.cluster != nil {
			shared.cluster.Stop()
		}
	})
	if shared.err != nil {
		tb.Fatalf("redistest: the shared cluster did not start: %v", shared.err)
	}
	return shared.cluster
}

// StopShared kills the shared cluster, if one was started, and removes its
// files. Call it from TestMain after m.Run.
func StopShared() {
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
}

// newCluster starts n masters under dir, one subdirectory each, and joins
// them. On error the returned cluster (if not nil) holds what was started.
func newCluster(bin, dir string, ownDir bool, n int, o options) (*Cluster, error) {
	if n <= 0 {
		n = 3
	}
	c := &Cluster{dir: dir, ownDir: ownDir}
	for i := range n {
		nodeDir := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(nodeDir, 0o750); err != nil {
			return c, err
		}
		s, err := spawn(bin, nodeDir, "", o, func() ([]string, error) {
			bus, err := freePort()
			if err != nil {
				return nil, err
			}
			args := []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", clusterNodeTimeout,
				"--cluster-port", strconv.Itoa(bus),
			}
			return append(args, o.args...), nil
		})
		if err != nil {
			return c, fmt.Errorf("redistest: cluster node %d: %w", i, err)
		}
		c.Masters = append(c.Masters, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.startTimeout+10*time.Second)
	defer cancel()
	for i, s := range c.Masters {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if _, err := s.do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return c, err
		}
		// Distinct epochs from the start: no collision to resolve.
		if _, err := s.do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return c, err
		}
	}
	for _, s := range c.Masters[1:] {
		port, bus := s.port, busPort(s.args)
		if _, err := c.Masters[0].do(ctx, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(port), bus); err != nil {
			return c, err
		}
	}
	return c, c.WaitOK(ctx)
}

// busPort returns the value of --cluster-port in args.
func busPort(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--cluster-port" {
			return args[i+1]
		}
	}
	return ""
}

// Addrs returns the nodes' addresses: the seed list of a cluster client.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		out[i] = m.Addr()
	}
	return out
}

// WaitOK waits until every node answers, reports cluster_state:ok and
// knows all the nodes, or ctx ends.
func (c *Cluster) WaitOK(ctx context.Context) error {
	want := strconv.Itoa(len(c.Masters))
	err := waitFor(ctx, func() error {
		for i, s := range c.Masters {
			reply, err := s.do(ctx, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			info, _ := reply.(string)
			state, _ := infoField(info, "cluster_state")
			known, _ := infoField(info, "cluster_known_nodes")
			slots, _ := infoField(info, "cluster_slots_ok")
			if state != "ok" || known != want || slots != strconv.Itoa(clusterSlots) {
				return fmt.Errorf("node %d: cluster_state:%s cluster_known_nodes:%s cluster_slots_ok:%s", i, state, known, slots)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: the cluster is not ok: %w", err)
	}
	return nil
}

// Stop kills every node and, for the shared cluster, removes its files.
func (c *Cluster) Stop() {
	for _, m := range c.Masters {
		m.stop()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// KillNode kills node i (SIGKILL; its slots are then served by nobody)
// and waits until it has exited.
func (c *Cluster) KillNode(i int) { c.Masters[i].stop() }

// RestartNode starts node i again on its port from its nodes.conf — the
// same node, owning the same slots, with no data — and waits until the
// cluster is ok again.
func (c *Cluster) RestartNode(tb testing.TB, i int) {
	tb.Helper()
	c.Masters[i].Restart(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitOK(ctx); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Do runs one command on node i over a new connection: a test's way to
// read one node (DBSIZE, INFO) or to break it (SCRIPT FLUSH, DEBUG SLEEP).
// The reply is a string, int64, nil or []any.
func (c *Cluster) Do(ctx context.Context, i int, args ...string) (any, error) {
	return c.Masters[i].do(ctx, args...)
}

// Do runs one command on the server over a new connection of a go-redis
// client (authenticated, if the server has a password). The reply is a
// string, int64, nil or []any, as go-redis reads RESP2.
func (s *Server) Do(ctx context.Context, args ...string) (any, error) {
	return s.do(ctx, args...)
}

func (s *Server) do(ctx context.Context, args ...string) (any, error) {
	return command(ctx, s.Addr(), s.tlsConfig, s.user, s.password, args...)
}

// spawn starts a child server under dir on a free port, with the arguments
// args returns (called again for every port tried, so that it can pick
// further free ports), after the config file conf if not "".
func spawn(bin, dir, conf string, o options, args func() ([]string, error)) (*Server, error) {
	var errs []error
	for range startAttempts {
		a, err := args()
		if err != nil {
			return nil, err
		}
		port, err := o.pickPort()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, dir: dir, conf: conf, args: a, startTimeout: o.startTimeout}
		err = s.launch(port)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("starting %s failed %d times: %w", bin, startAttempts, errors.Join(errs...))
}
