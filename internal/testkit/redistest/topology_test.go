package redistest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestClusterStartsOK starts a 3-master cluster: every node owns a third of
// the slots and reports cluster_state:ok; a killed node restarts with its
// slots.
func TestClusterStartsOK(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("figure: a 3-master cluster started in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if len(c.Addrs()) != 3 {
		t.Fatalf("addrs %v", c.Addrs())
	}
	reply, err := c.Do(ctx, 1, "CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(reply.(string), "master"); n != 3 {
		t.Errorf("CLUSTER NODES shows %d masters:\n%s", n, reply)
	}
	c.KillNode(2)
	c.RestartNode(t, 2)
	if err := c.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSentinelFailover starts a master, a replica and one sentinel, kills
// the master and waits for the sentinel to promote the replica.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	start := time.Now()
	st := StartSentinel(t, 1)
	t.Logf("figure: a master, a replica and a sentinel started in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	old, err := st.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old != st.Nodes[0].Addr() {
		t.Fatalf("master %s, want %s", old, st.Nodes[0].Addr())
	}
	killed := time.Now()
	if _, err := st.KillMaster(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := st.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if m != st.Nodes[1] {
		t.Fatalf("new master %s", m.Addr())
	}
	t.Logf("figure: the sentinel promoted the replica %v after the master was killed", time.Since(killed).Round(time.Millisecond))
}

// TestThreeSentinelsFailover starts three sentinels (quorum 2) and asks
// them for a failover: the replica becomes master.
func TestThreeSentinelsFailover(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	old, err := st.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := st.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if m != st.Nodes[1] {
		t.Fatalf("new master %s", m.Addr())
	}
}
