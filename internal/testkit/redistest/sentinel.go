package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SentinelMaster is the name under which the sentinels of [StartSentinel]
// monitor their master.
const SentinelMaster = "spillway"

// SentinelDownAfter is the sentinels' down-after-milliseconds: how long a
// master must fail to answer before a sentinel thinks it down. A failover
// then takes about this plus the sentinels' election and the promotion.
const SentinelDownAfter = 1000 * time.Millisecond

// Sentinel is a Sentinel-managed pair: a master, one replica and the
// sentinels watching them, all child processes on 127.0.0.1. Which of the
// two data servers is master changes at a failover: ask [Sentinel.Master].
type Sentinel struct {
	tb        testing.TB
	Nodes     [2]*Server // the data servers: Nodes[0] starts as master
	Sentinels []*Server
}

// StartSentinel starts a master, a replica of it, and n sentinels (1 when
// n ≤ 0; n = 3 for a real quorum) with a quorum of n/2+1, and waits until
// the replica is in sync and every sentinel knows the replica and the other
// sentinels. Everything is killed in tb.Cleanup. Options other than WithArgs
// (given to the data servers) and WithStartTimeout are ignored.
func StartSentinel(tb testing.TB, n int, opts ...Option) *Sentinel {
	tb.Helper()
	if n <= 0 {
		n = 1
	}
	o := newOptions(opts)
	bin := findBinary(tb, o)
	dir := tb.TempDir()
	st := &Sentinel{tb: tb}
	tb.Cleanup(func() {
		for _, s := range st.Sentinels {
			s.stop()
		}
		for _, s := range st.Nodes {
			if s != nil {
				s.stop()
			}
		}
		if tb.Failed() {
			for _, s := range append(st.Nodes[:], st.Sentinels...) {
				if s != nil {
					tb.Logf("redistest: tail of %s:\n%s", s.currentLog(), s.logTail(10))
				}
			}
		}
	})
	fail := func(what string, err error) {
		tb.Helper()
		tb.Fatalf("redistest: sentinel setup: %s: %v", what, err)
	}
	sub := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o750); err != nil {
			fail("mkdir", err)
		}
		return d
	}
	// Either server may be master after a failover: neither waits before
	// serving a full sync (the default waits 5 s for more replicas).
	data := append([]string{"--repl-diskless-sync-delay", "0"}, o.args...)
	master, err := spawn(bin, sub("master"), "", o, func() ([]string, error) { return data, nil })
	if err != nil {
		fail("master", err)
	}
	st.Nodes[0] = master
	mport := strconv.Itoa(master.port)
	replica, err := spawn(bin, sub("replica"), "", o, func() ([]string, error) {
		return append([]string{"--replicaof", "127.0.0.1", mport}, data...), nil
	})
	if err != nil {
		fail("replica", err)
	}
	st.Nodes[1] = replica

	ctx, cancel := context.WithTimeout(context.Background(), o.startTimeout+20*time.Second)
	defer cancel()
	if err := waitFor(ctx, func() error { return inSync(ctx, replica) }); err != nil {
		fail("replica sync", err)
	}

	quorum := n/2 + 1
	for i := range n {
		d := sub(fmt.Sprintf("sentinel%d", i))
		conf := filepath.Join(d, "sentinel.conf")
		text := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s 127.0.0.1 %[2]s %[3]d
sentinel down-after-milliseconds %[1]s %[4]d
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
`, SentinelMaster, mport, quorum, SentinelDownAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			fail("sentinel.conf", err)
		}
		s, err := spawn(bin, d, conf, o, func() ([]string, error) { return nil, nil })
		if err != nil {
			fail(fmt.Sprintf("sentinel %d", i), err)
		}
		st.Sentinels = append(st.Sentinels, s)
	}
	err = waitFor(ctx, func() error {
		for i, s := range st.Sentinels {
			reps, err := s.do(ctx, "SENTINEL", "REPLICAS", SentinelMaster)
			if err != nil {
				return err
			}
			if l, _ := reps.([]any); len(l) != 1 {
				return fmt.Errorf("sentinel %d knows %d replicas", i, len(l))
			}
			others, err := s.do(ctx, "SENTINEL", "SENTINELS", SentinelMaster)
			if err != nil {
				return err
			}
			if l, _ := others.([]any); len(l) != n-1 {
				return fmt.Errorf("sentinel %d knows %d other sentinels", i, len(l))
			}
		}
		return nil
	})
	if err != nil {
		fail("sentinels' discovery", err)
	}
	return st
}

// waitFor calls f every 20 ms until it returns nil or ctx ends.
func waitFor(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// inSync reports nil when replica's link to its master is up.
func inSync(ctx context.Context, replica *Server) error {
	reply, err := replica.do(ctx, "INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := reply.(string)
	if v, _ := infoField(info, "master_link_status"); v != "up" {
		return fmt.Errorf("master_link_status:%s", v)
	}
	return nil
}

// SentinelAddrs returns the sentinels' addresses: the seed list of a
// failover client.
func (st *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// MasterAddr asks the first sentinel that answers for the master's address.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, s := range st.Sentinels {
		reply, err := s.do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
		if err != nil {
			last = err
			continue
		}
		l, _ := reply.([]any)
		if len(l) != 2 {
			last = fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME answered %v", reply)
			continue
		}
		host, _ := l[0].(string)
		port, _ := l[1].(string)
		return net.JoinHostPort(host, port), nil
	}
	return "", last
}

// Master returns the data server the sentinels name as master.
func (st *Sentinel) Master(ctx context.Context) (*Server, error) {
	addr, err := st.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range st.Nodes {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: the sentinels name %s as master, none of ours", addr)
}

// KillMaster kills the current master (SIGKILL) and returns it, so that a
// test can Restart it (it comes back as a master the sentinels then turn
// into a replica of the new one). The sentinels notice after
// SentinelDownAfter and promote the replica: WaitFailover waits for it.
func (st *Sentinel) KillMaster(ctx context.Context) (*Server, error) {
	m, err := st.Master(ctx)
	if err != nil {
		return nil, err
	}
	m.stop()
	return m, nil
}

// Failover asks a sentinel for a failover now (SENTINEL FAILOVER), without
// waiting for the master to fail: the replica is promoted and the old master
// becomes its replica. WaitFailover waits for it.
func (st *Sentinel) Failover(ctx context.Context) error {
	_, err := st.Sentinels[0].do(ctx, "SENTINEL", "FAILOVER", SentinelMaster)
	return err
}

// WaitFailover waits until the sentinels name a master other than old
// (an address) and that master answers as a master, or ctx ends. It
// returns the new master.
func (st *Sentinel) WaitFailover(ctx context.Context, old string) (*Server, error) {
	var m *Server
	err := waitFor(ctx, func() error {
		addr, err := st.MasterAddr(ctx)
		if err != nil {
			return err
		}
		if addr == old {
			return fmt.Errorf("the master is still %s", old)
		}
		s, err := st.Master(ctx)
		if err != nil {
			return err
		}
		reply, err := s.do(ctx, "ROLE")
		if err != nil {
			return err
		}
		if l, _ := reply.([]any); len(l) == 0 || l[0] != "master" {
			return fmt.Errorf("%s answers ROLE %v", addr, reply)
		}
		m = s
		return nil
	})
	return m, err
}
