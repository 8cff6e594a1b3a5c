// Package netns_test partitions real hosts from each other: redis-server in
// one Linux network namespace, admitters in another, joined by a veth pair,
// and the link between them taken down while a load submits.
//
// It needs root and iproute2's ip, so it runs only when asked:
// SPILLWAY_NETNS=1 or SPILLWAY_RELIABILITY=full (`make netns`,
// `make reliability`). Figures are logged as `figure:` lines
// (docs/scaling.md).
package netns_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/testkit/proc"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// enabled skips t unless the namespaces can be made and the run asked for
// them.
func enabled(t *testing.T) {
	t.Helper()
	if os.Getenv("SPILLWAY_NETNS") != "1" && os.Getenv("SPILLWAY_RELIABILITY") != "full" {
		t.Skip("network-namespace partitions run with SPILLWAY_NETNS=1 or SPILLWAY_RELIABILITY=full (make netns), as root with iproute2's ip")
	}
	if os.Geteuid() != 0 {
		t.Skip("network-namespace partitions need root (ip netns add)")
	}
	for _, bin := range []string{"ip", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("network-namespace partitions need %s on PATH: %v", bin, err)
		}
	}
}

// figure logs a measured figure in the form `make netns` collects.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("figure: "+format, args...)
}

// ipCmd runs `ip args...` and fails t with its output on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(context.Background(), "ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ipQuiet runs `ip args...` for a cleanup, where a failure (the thing is
// gone already) is no error.
func ipQuiet(args ...string) {
	_ = exec.CommandContext(context.Background(), "ip", args...).Run()
}

// topology is two namespaces, redis and admitters, joined by a veth pair
// (the link the test cuts), and a second veth pair from the admitters'
// namespace to the test's, which carries the load and the NATS traffic.
type topology struct {
	redisNS, admNS string
	redisLink      string // the redis namespace's end of the cut link
	redisAddr      string // redis-server's address in its namespace
	hostAddr       string // the test's end of the load link
	admAddr        string // the admitters' end of the load link
}

func newTopology(t *testing.T) *topology {
	t.Helper()
	b := newID(t)
	id := hex.EncodeToString(b)
	tp := &topology{
		redisNS:   "spillway-" + id + "-redis",
		admNS:     "spillway-" + id + "-adm",
		redisLink: "swr" + id,
		redisAddr: "10.99.0.1",
	}
	for _, ns := range []string{tp.redisNS, tp.admNS} {
		addNetns(t, ns)
	}
	// The cut link: redis namespace <-> admitters' namespace.
	ipCmd(t, "link", "add", tp.redisLink, "type", "veth", "peer", "name", "swa"+id)
	t.Cleanup(func() { ipQuiet("link", "del", tp.redisLink) }) // if it never moved
	ipCmd(t, "link", "set", tp.redisLink, "netns", tp.redisNS)
	ipCmd(t, "link", "set", "swa"+id, "netns", tp.admNS)
	ipCmd(t, "-n", tp.redisNS, "addr", "add", tp.redisAddr+"/30", "dev", tp.redisLink)
	ipCmd(t, "-n", tp.admNS, "addr", "add", "10.99.0.2/30", "dev", "swa"+id)
	ipCmd(t, "-n", tp.redisNS, "link", "set", tp.redisLink, "up")
	ipCmd(t, "-n", tp.admNS, "link", "set", "swa"+id, "up")
	tp.hostAddr, tp.admAddr = loadLink(t, b, tp.admNS)
	return tp
}

// addNetns adds a network namespace with its loopback up, deleted (with
// the veth ends in it) when t ends.
func addNetns(t *testing.T, ns string) {
	t.Helper()
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { ipQuiet("netns", "del", ns) })
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
}

// newID is a random id, unique per run, for names and the load link's
// subnet.
func newID(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// loadLink joins the test's namespace to ns by a veth pair and returns
// the addresses of its two ends (the test's, ns's). Its /30 lives in the
// test's namespace, which other runs share: it is taken from the random
// id b.
func loadLink(t *testing.T, b []byte, ns string) (host, inNS string) {
	t.Helper()
	id := hex.EncodeToString(b)
	net2 := fmt.Sprintf("10.%d.%d", 100+int(b[0])%100, b[1])
	host, inNS = net2+".1", net2+".2"
	ipCmd(t, "link", "add", "swh"+id, "type", "veth", "peer", "name", "swx"+id)
	t.Cleanup(func() { ipQuiet("link", "del", "swh"+id) })
	ipCmd(t, "link", "set", "swx"+id, "netns", ns)
	ipCmd(t, "addr", "add", host+"/30", "dev", "swh"+id)
	ipCmd(t, "-n", ns, "addr", "add", inNS+"/30", "dev", "swx"+id)
	ipCmd(t, "link", "set", "swh"+id, "up")
	ipCmd(t, "-n", ns, "link", "set", "swx"+id, "up")
	return host, inNS
}

// partition takes the redis namespace's end of the link down: the
// admitters' end keeps its route and its packets vanish, as in a real
// partition (no error comes back, only silence).
func (tp *topology) partition(t *testing.T) {
	ipCmd(t, "-n", tp.redisNS, "link", "set", tp.redisLink, "down")
}

func (tp *topology) heal(t *testing.T) {
	ipCmd(t, "-n", tp.redisNS, "link", "set", tp.redisLink, "up")
}

// child is a process run in a namespace.
type child struct {
	name string
	log  string
	done chan struct{}
	cmd  *exec.Cmd
	err  error
}

// startIn runs bin in namespace ns (ip netns exec execs it, so the pid is
// the program's) and waits until a stdout line matches ready; it returns
// the first submatch of ready, if any.
func startIn(t *testing.T, ns, name string, ready *regexp.Regexp, bin string, args ...string) (*child, string) {
	t.Helper()
	c := &child{name: name, log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.CommandContext(context.Background(), "ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	c.cmd.Stderr = logf
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	proc.SetParentDeathSignal(c.cmd)
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, "stdout:", line)
			if m := ready.FindStringSubmatch(line); m != nil {
				v := ""
				if len(m) > 1 {
					v = m[1]
				}
				select {
				case got <- v:
				default:
				}
			}
		}
	}()
	go func() {
		c.err = c.cmd.Wait()
		_ = logf.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			t.Logf("%s log (last 4 KiB):\n%s", name, b)
		}
	})
	select {
	case v := <-got:
		return c, v
	case <-c.done:
		b, _ := os.ReadFile(c.log)
		t.Fatalf("%s exited before it was ready (%v):\n%s", name, c.err, b)
	case <-time.After(60 * time.Second):
		b, _ := os.ReadFile(c.log)
		t.Fatalf("%s not ready within 60s:\n%s", name, b)
	}
	return nil, ""
}

// buildAdmitter builds cmd/admitter into a temporary directory.
func buildAdmitter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "admitter")
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "../../cmd/admitter")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/admitter: %v\n%s", err, out)
	}
	return bin
}

// startNATS runs an embedded JetStream server on addr (the test's end of
// the load link), which the admitters reach across it.
func startNATS(t *testing.T, addr string) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: addr, Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not accept connections within 10s")
	}
	return "nats://" + srv.Addr().String()
}

// The admitters' configuration: one queue whose per-key limit refuses
// some of the load while Redis decides, READY and the backlog big enough
// that every job answered 202 is stored, and a Redis budget of 250ms per
// decision (a partitioned Redis costs a request at most that, once per
// failover backoff).
const admConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s:6379/0", timeout: %[4]s}
http: {listen: "%[3]s:0"}
queues:
  - name: nx
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 20/s, burst: 10, nodelay: true}
    ready: {capacity: 1000000}
    backlog: {capacity: 1000000, leak_rate: 100/s}
    handler: {http: {url: "http://127.0.0.1:9/unused", timeout: 5s}}
`

const redisTimeout = 250 * time.Millisecond

// maxFailoverBackoff is the longest time an admitter leaves an unreachable
// Redis alone before it probes it again (internal/admit/failover.go).
const maxFailoverBackoff = 2 * time.Second

type sample struct {
	mode       string
	sent, got  time.Time
	code       int // -1: no answer (lost)
	status     spillway.Status
	ptype      string
	retryAfter string
	err        string
}

func submit(client *http.Client, addr, key string) sample {
	s := sample{sent: time.Now(), code: -1}
	defer func() { s.got = time.Now() }()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/v1/queues/nx/jobs", strings.NewReader(key))
	if err != nil {
		s.err = err.Error()
		return s
	}
	req.Header.Set("X-Client", key)
	resp, err := client.Do(req)
	if err != nil {
		s.err = err.Error()
		s.got = time.Now()
		return s
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	s.code, s.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	if resp.StatusCode == http.StatusAccepted {
		var r spillway.SubmitReply
		if err := json.Unmarshal(body, &r); err == nil {
			s.status = r.Status
		}
	} else {
		var p spillway.Problem
		if err := json.Unmarshal(body, &p); err == nil {
			s.ptype = p.Type
		}
	}
	s.got = time.Now()
	return s
}

// redisDecisions is how many submissions the admitter at addr had decided
// in Redis (reasons limit and excess), read from its /metrics.
func redisDecisions(t *testing.T, client *http.Client, addr string) float64 {
	t.Helper()
	resp, err := client.Get("http://" + addr + "/metrics") //nolint:noctx // a test's scrape, bounded by the client's timeout
	if err != nil {
		t.Errorf("scraping %s: %v", addr, err)
		return 0
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "spillway_decisions_total{") ||
			(!strings.Contains(line, `reason="limit"`) && !strings.Contains(line, `reason="excess"`)) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// startLoad submits from 4 goroutines per admitter (addrs: by name), each
// at most once every 10ms, over 4 keys per goroutine, until the returned
// finish is called (or t ends); finish returns every sample, oldest first.
func startLoad(t *testing.T, client *http.Client, addrs map[string]string) (finish func() []sample) {
	var (
		mu      sync.Mutex
		samples []sample
		wg      sync.WaitGroup
		once    sync.Once
	)
	stop := make(chan struct{})
	for m, addr := range addrs {
		for g := range 4 {
			wg.Go(func() {
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				var mine []sample
				for i := 0; ; i++ {
					select {
					case <-stop:
						mu.Lock()
						samples = append(samples, mine...)
						mu.Unlock()
						return
					case <-tick.C:
					}
					s := submit(client, addr, fmt.Sprintf("%s-%d-%d", m, g, i%4))
					s.mode = m
					mine = append(mine, s)
				}
			})
		}
	}
	finish = func() []sample {
		once.Do(func() { close(stop) })
		wg.Wait()
		sort.Slice(samples, func(i, j int) bool { return samples[i].sent.Before(samples[j].sent) })
		return samples
	}
	t.Cleanup(func() { finish() })
	return finish
}

var admitterLine = regexp.MustCompile(`^spillway admitter: http://(\S+)`)

// TestReliabilityNetnsRedisPartition: redis-server and two admitters (failure modes
// open and closed) in different network namespaces; the link between
// them goes down for a while under an HTTP load.
//   - Partitioned: open answers every job 202 admitted, closed answers 503
//     with Retry-After and the unavailable problem type.
//   - Nothing lost: every request gets an HTTP answer, and every job
//     answered 202 is in the queue's streams.
//   - Healed: each admitter's Redis decisions resume by themselves within
//     the failover's longest backoff plus a decision's budget and a margin.
func TestReliabilityNetnsRedisPartition(t *testing.T) {
	enabled(t)
	down := 4 * time.Second
	if os.Getenv("SPILLWAY_RELIABILITY") == "full" {
		down = 10 * time.Second
	}
	bin := buildAdmitter(t)
	tp := newTopology(t)
	startIn(t, tp.redisNS, "redis-server", regexp.MustCompile(`Ready to accept connections`),
		"redis-server", "--bind", tp.redisAddr, "--port", "6379", "--save", "", "--appendonly", "no", "--protected-mode", "no")
	natsURL := startNATS(t, tp.hostAddr)

	cfg := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, admConfig, natsURL, tp.redisAddr, tp.admAddr, redisTimeout), 0o600); err != nil {
		t.Fatal(err)
	}
	modes := []string{"open", "closed"}
	addrs := map[string]string{}
	for _, m := range modes {
		_, addrs[m] = startIn(t, tp.admNS, "admitter-"+m, admitterLine, bin, "--config", cfg, "--failure-mode", m)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(client.CloseIdleConnections)

	// The load: 4 goroutines per admitter, each at most one submission
	// every 10ms, over 4 keys per goroutine.
	finish := startLoad(t, client, addrs)
	time.Sleep(2 * time.Second) // Redis decides
	tp.partition(t)
	cut := time.Now()
	time.Sleep(down)
	before := map[string]float64{}
	for _, m := range modes {
		before[m] = redisDecisions(t, client, addrs[m])
	}
	healing := time.Now()
	tp.heal(t)
	healed := time.Now()

	recovered := map[string]time.Duration{}
	var rmu sync.Mutex
	var pollers sync.WaitGroup
	for _, m := range modes {
		pollers.Go(func() {
			for time.Since(healed) < 60*time.Second {
				at := time.Now()
				if redisDecisions(t, client, addrs[m]) > before[m] {
					rmu.Lock()
					recovered[m] = at.Sub(healed)
					rmu.Unlock()
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	pollers.Wait()
	time.Sleep(2 * time.Second) // Redis decides again
	all := finish()

	// Every request answered, counted by phase and verdict.
	byPhase := map[string]map[string]int{}
	lost, accepted := 0, 0
	for _, s := range all {
		p := "up"
		switch {
		case s.sent.After(cut) && s.got.Before(healing):
			p = "partitioned"
		case s.sent.After(healed):
			p = "healed"
		case !s.sent.Before(cut) || !s.got.Before(cut):
			p = "edges"
		}
		verdict := strconv.Itoa(s.code)
		if s.code == http.StatusAccepted {
			verdict += " " + string(s.status)
			accepted++
		} else if s.code < 0 {
			verdict = "no answer"
			lost++
			if lost <= 5 {
				t.Errorf("%s: submission sent %v after the cut got no answer: %s", s.mode, s.sent.Sub(cut).Round(time.Millisecond), s.err)
			}
		}
		k := s.mode + " " + p
		if byPhase[k] == nil {
			byPhase[k] = map[string]int{}
		}
		byPhase[k][verdict]++
		if p != "partitioned" {
			continue
		}
		switch s.mode {
		case "open":
			if s.code != http.StatusAccepted || s.status != spillway.Admitted {
				t.Errorf("open, partitioned: answer %d %q %s; want 202 admitted", s.code, s.status, s.ptype)
			}
		case "closed":
			if s.code != http.StatusServiceUnavailable || s.retryAfter == "" || s.ptype != spillway.ProblemUnavailable {
				t.Errorf("closed, partitioned: answer %d, Retry-After %q, type %q; want 503 with Retry-After and %s",
					s.code, s.retryAfter, s.ptype, spillway.ProblemUnavailable)
			}
		}
	}
	keys := make([]string, 0, len(byPhase))
	for k := range byPhase {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		figure(t, "Redis partitioned %v, %s: answers by verdict %v", down, k, byPhase[k])
	}
	for _, m := range modes {
		if byPhase[m+" partitioned"] == nil {
			t.Errorf("%s: no submission was answered inside the partition; the load proves nothing", m)
		}
	}
	figure(t, "Redis partition: %d submissions, %d without an answer, %d answered 202", len(all), lost, accepted)

	// Every job answered 202 is stored in READY or the backlog.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored := uint64(0)
	for _, d := range []queue.Destination{queue.Ready, queue.Backlog} {
		s, err := js.Stream(ctx, queue.StreamName("nx", d))
		if err != nil {
			t.Fatalf("stream %s: %v", queue.StreamName("nx", d), err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stored += info.State.Msgs
	}
	figure(t, "Redis partition: %d jobs answered 202, %d stored in READY and the backlog", accepted, stored)
	if stored != uint64(accepted) {
		t.Errorf("%d jobs answered 202 but %d stored", accepted, stored)
	}

	// Healed: Redis decides again by itself.
	bound := maxFailoverBackoff + redisTimeout + 2*time.Second
	for _, m := range modes {
		took, ok := recovered[m]
		if !ok {
			t.Errorf("%s: Redis never decided again within 60 s of the link coming back", m)
			continue
		}
		figure(t, "%s: Redis decides again %v after the link comes back (bound %v: longest backoff %v + budget %v + 2 s)",
			m, took.Round(time.Millisecond), bound, maxFailoverBackoff, redisTimeout)
		if took > bound {
			t.Errorf("%s: Redis decided again only %v after the link came back; want ≤ %v", m, took, bound)
		}
	}
}
