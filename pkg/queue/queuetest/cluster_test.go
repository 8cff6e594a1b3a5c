package queuetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Three nodes make one JetStream cluster: an R3 stream has a leader and two
// current followers; with its leader shut down another node leads and
// takes publishes; the leader restarted on its store catches up and holds
// every message.
func TestClusterLeaderShutdownAndRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := queuetest.StartCluster(t, 3)
	if got := strings.Count(c.URL(), "nats://"); got != 3 {
		t.Fatalf("cluster URL %q names %d servers, want 3", c.URL(), got)
	}
	js := c.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	c.WaitCurrent(t, js, "R3", time.Minute)
	// A stream just made current may not have its subject's interest at
	// every node yet (no responders), on a loaded machine.
	publishUntil(t, ctx, js, "before", "no publish went through on the new stream")
	s, err := js.Stream(ctx, "R3")
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	node := c.Node(leader)
	if node == nil {
		t.Fatalf("stream leader %q is none of the cluster's nodes", leader)
	}
	node.Shutdown()
	if node.Running() {
		t.Fatalf("%s still running after Shutdown", node)
	}
	// Publishes go through once another node leads.
	publishUntil(t, ctx, js, "during", "no publish went through with "+leader+" down")
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster.Leader == leader || info.Cluster.Leader == "" {
		t.Fatalf("leader is %q with %s down", info.Cluster.Leader, leader)
	}
	node.Restart(t)
	c.WaitCurrent(t, js, "R3", time.Minute)
	info, err = s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages after the restart, want 2", info.State.Msgs)
	}
	var back bool
	for _, r := range info.Cluster.Replicas {
		back = back || (r.Name == leader && r.Current)
	}
	if !back && info.Cluster.Leader != leader {
		t.Fatalf("%s is not a current replica after its restart: %+v", leader, info.Cluster)
	}
}

// publishUntil publishes data to r3.a until JetStream acknowledges it, or
// fails t with what when ctx ends. Each try has 2 s (a request lost in a
// young cluster is never answered) and the same message id, so a try
// whose acknowledgement was lost stores the message once.
func publishUntil(t *testing.T, ctx context.Context, js jetstream.JetStream, data, what string) {
	t.Helper()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.Publish(pctx, "r3.a", []byte(data), jetstream.WithMsgID(data))
		pcancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
