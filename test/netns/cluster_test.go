package netns_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestReliabilityNetnsNATSPartition: a 3-node JetStream cluster (Debian's
// nats-server), each node in a network namespace of its own, joined by a
// bridge in the admitter's namespace; queue streams at R3. The admitter
// knows node 1 only (it learns the others from the cluster). READY's stream
// leader is cut off (its end of the link down) under an HTTP load, or node
// 3 when node 1 leads READY.
//   - Nothing lost: every request gets an HTTP answer (202, or 503 while
//     a stream elects a leader: a store whose PubAck never comes is
//     answered 503 after door.SubmitTimeout).
//   - Admission goes on through the majority side: jobs are answered 202
//     during the cut; the longest stretch without a 202 is a figure.
func TestReliabilityNetnsNATSPartition(t *testing.T) {
	enabled(t)
	natsBin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skipf("the NATS partition needs Debian's nats-server on PATH: %v", err)
	}
	down := 20 * time.Second
	if os.Getenv("SPILLWAY_RELIABILITY") == "full" {
		down = 40 * time.Second
	}
	bin := buildAdmitter(t)
	b := newID(t)
	id := hex.EncodeToString(b)
	admNS := "spillway-" + id + "-adm"
	addNetns(t, admNS)
	ipCmd(t, "-n", admNS, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", admNS, "addr", "add", "10.98.0.10/24", "dev", "br0")
	ipCmd(t, "-n", admNS, "link", "set", "br0", "up")
	nodeLink := func(i int) string { return fmt.Sprintf("swn%d%s", i, id) }
	nodeNS := func(i int) string { return fmt.Sprintf("spillway-%s-nats%d", id, i) }
	nodeAddr := func(i int) string { return fmt.Sprintf("10.98.0.%d", i) }
	for i := 1; i <= 3; i++ {
		ns, link, peer := nodeNS(i), nodeLink(i), fmt.Sprintf("swb%d%s", i, id)
		addNetns(t, ns)
		ipCmd(t, "link", "add", link, "type", "veth", "peer", "name", peer)
		t.Cleanup(func() { ipQuiet("link", "del", link) })
		ipCmd(t, "link", "set", link, "netns", ns)
		ipCmd(t, "link", "set", peer, "netns", admNS)
		ipCmd(t, "-n", ns, "addr", "add", nodeAddr(i)+"/24", "dev", link)
		ipCmd(t, "-n", ns, "link", "set", link, "up")
		ipCmd(t, "-n", admNS, "link", "set", peer, "master", "br0")
		ipCmd(t, "-n", admNS, "link", "set", peer, "up")
	}
	_, admAddr := loadLink(t, b, admNS)

	var routes []string
	for i := 1; i <= 3; i++ {
		routes = append(routes, "nats://"+nodeAddr(i)+":6222")
	}
	metaLeader := regexp.MustCompile(`JetStream cluster (new metadata leader|metadata leader)`)
	started := make(chan struct{}, 3)
	nodes := make([]*child, 4)
	for i := 1; i <= 3; i++ {
		dir := t.TempDir()
		go func() {
			defer func() { started <- struct{}{} }()
			// nats-server logs to stderr: sh joins it to stdout, where
			// startIn waits for the cluster's metadata leader.
			nodes[i], _ = startIn(t, nodeNS(i), fmt.Sprintf("nats-%d", i), metaLeader, "sh", "-c",
				fmt.Sprintf("exec %s -js -n n%d -a %s -p 4222 -sd %s --cluster_name sw --cluster nats://%s:6222 --routes %s 2>&1",
					natsBin, i, nodeAddr(i), dir, nodeAddr(i), strings.Join(routes, ",")))
		}()
	}
	for range 3 {
		<-started
	}
	if t.Failed() {
		t.FailNow()
	}

	cfg := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `
nats: {url: "nats://%s:4222", replicas: 3}
http: {listen: "%s:0"}
queues:
  - name: nx
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1000/s, burst: 1000, nodelay: true}
    ready: {capacity: 1000000}
    backlog: {capacity: 1000000, leak_rate: 100/s}
    handler: {http: {url: "http://127.0.0.1:9/unused", timeout: 5s}}
`, nodeAddr(1), admAddr), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := startIn(t, admNS, "admitter", admitterLine, bin, "--config", cfg)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(client.CloseIdleConnections)

	finish := startLoad(t, client, map[string]string{"cluster": addr})
	time.Sleep(2 * time.Second)
	// Cut READY's stream leader off, unless it is node 1, which the
	// admitter is connected to (a client learns of a silent server only
	// by its pings, minutes apart): then node 3.
	cutNode, why := 3, "a follower of READY (its leader is node 1, the admitter's)"
	for _, i := range []int{2, 3} {
		if b, err := os.ReadFile(nodes[i].log); err == nil && bytes.Contains(b, []byte("new stream leader for '$G > SPILLWAY_nx_READY'")) {
			cutNode, why = i, "READY's stream leader"
		}
	}
	t.Logf("cutting node %d off: %s", cutNode, why)
	ipCmd(t, "-n", nodeNS(cutNode), "link", "set", nodeLink(cutNode), "down")
	cut := time.Now()
	time.Sleep(down)
	healing := time.Now()
	ipCmd(t, "-n", nodeNS(cutNode), "link", "set", nodeLink(cutNode), "up")
	time.Sleep(2 * time.Second)
	all := finish()

	byPhase := map[string]map[int]int{}
	lost, inCut := 0, 0
	var lastAdmit time.Time
	longest := time.Duration(0)
	for _, s := range all {
		p := "up"
		switch {
		case s.sent.After(cut) && s.got.Before(healing):
			p = "cut"
		case s.sent.After(healing):
			p = "healed"
		case !s.got.Before(cut):
			p = "edges"
		}
		if byPhase[p] == nil {
			byPhase[p] = map[int]int{}
		}
		byPhase[p][s.code]++
		switch {
		case s.code < 0:
			lost++
			if lost <= 5 {
				t.Errorf("a submission sent %v after the cut got no answer: %s", s.sent.Sub(cut).Round(time.Millisecond), s.err)
			}
		case s.code == http.StatusAccepted:
			if p == "cut" {
				inCut++
			}
			if !s.got.Before(cut) && s.got.Before(healing) {
				if lastAdmit.IsZero() {
					lastAdmit = cut
				}
				longest = max(longest, s.got.Sub(lastAdmit))
				lastAdmit = s.got
			}
		case s.code == http.StatusServiceUnavailable && s.ptype == spillway.ProblemUnavailable:
		default:
			t.Errorf("answer %d %q %s; want 202, or 503 unavailable", s.code, s.status, s.ptype)
		}
	}
	for _, p := range []string{"up", "edges", "cut", "healed"} {
		figure(t, "NATS node %d of 3 (%s) cut off %v, %s: answers by HTTP status %v", cutNode, why, down, p, byPhase[p])
	}
	figure(t, "NATS node cut: %d submissions, %d without an answer, %d answered 202 during the cut; longest stretch without a 202 from the cut on: %v",
		len(all), lost, inCut, longest.Round(time.Millisecond))
	if inCut == 0 {
		t.Errorf("no job admitted while node 3 was cut off; the majority side should go on admitting")
	}
}
