package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// These tests check spillctl's side of the admitter's contract (docs/design.md#doors,
// pkg/spillway) against a stand-in written here; end-to-end tests against
// the real admitter belong with it.

var t0 = time.Date(2026, 3, 1, 12, 0, 3, 0, time.UTC)

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func TestFormatReply(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rep  spillway.SubmitReply
		want string
	}{
		{spillway.SubmitReply{ID: "j1", Status: spillway.Admitted}, "admitted id=j1"},
		{spillway.SubmitReply{ID: "j2", Status: spillway.Queued, Position: 3, NotBefore: at(2200 * time.Millisecond), EstimatedStart: at(1200 * time.Millisecond)},
			"queued  id=j2  position=3  not_before=12:00:05.200  (estimated start in 1.2s)"},
		{spillway.SubmitReply{ID: "j3", Status: spillway.Queued, NotBefore: at(-time.Second)}, "queued  id=j3  not_before=12:00:02.000  (estimated start now)"},
		{spillway.SubmitReply{ID: "j4", Status: spillway.Queued, NotBefore: at(26 * time.Hour)}, "queued  id=j4  not_before=2026-03-02 14:00:03.000  (estimated start in 1d02h)"},
		{spillway.SubmitReply{Status: spillway.Rejected, RetryAfterMS: 2500, Type: spillway.ProblemQueueFull}, "rejected retry after 2.5s (queue-full)"},
		{spillway.SubmitReply{Status: spillway.Rejected, Type: spillway.ProblemRateLimited}, "rejected (rate-limited)"},
		{spillway.SubmitReply{ID: "j5", Status: spillway.Admitted, Duplicate: true}, "admitted id=j5  (duplicate: the answer to an earlier submit with this idempotency key)"},
	} {
		if got := formatReply(c.rep, t0); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.rep, got, c.want)
		}
	}
}

func TestFmtDur(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0ms", 849 * time.Microsecond: "1ms", 250 * time.Millisecond: "250ms", 1200 * time.Millisecond: "1.2s",
		42 * time.Second: "42s", 185 * time.Second: "3m05s", 130 * time.Minute: "2h10m", 76 * time.Hour: "3d04h", -2 * time.Second: "-2.0s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %s, want %s", d, got, want)
		}
	}
	for ns, want := range map[int64]string{850: "850ns", 850_000: "850µs", 1_214_000: "1.21ms", 12_340_000: "12.3ms", 123_400_000: "123ms", 1_234_000_000: "1.23s"} {
		if got := fmtLatency(ns); got != want {
			t.Errorf("fmtLatency(%d) = %s, want %s", ns, got, want)
		}
	}
}

func TestFormatJob(t *testing.T) {
	t.Parallel()
	got := formatJob(jobStatus{
		ID: "j1", Queue: "email", State: "retrying", Attempts: 2, LastError: "smtp: 451 try later",
		EnqueuedAt: at(-65 * time.Second), NotBefore: at(1200 * time.Millisecond), UpdatedAt: at(0),
	}, t0)
	want := "job j1\n" +
		"  queue       email\n" +
		"  state       retrying\n" +
		"  attempts    2\n" +
		"  last error  smtp: 451 try later\n" +
		"  enqueued    11:58:58.000  (1m05s ago)\n" +
		"  not before  12:00:04.200  (in 1.2s)\n" +
		"  updated     12:00:03.000  (now)\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

var demoQueues = []spillway.QueueInfo{
	{Name: "email", Ready: 3, Depth: 120, Capacity: 10000, Fill: 0.012, Dead: 2, LeakRate: "50/s", InFlight: 3, OldestAgeMS: 2400, EstimatedDrainMS: 2400, BacklogPullers: 1},
	{Name: "sms-outbound", Depth: 5, Capacity: 100, Fill: 0.05, LeakRate: "1/s", OldestAgeMS: 61_000, EstimatedDrainMS: 5000},
	{Name: "idle", Capacity: 100, LeakRate: "5/s"},
}

func TestFormatQueues(t *testing.T) {
	t.Parallel()
	got := formatQueues(demoQueues)
	want := "QUEUE         DEPTH/CAP  FILL  LEAK  READY  IN FLIGHT  OLDEST  DRAIN  DEAD\n" +
		"email         120/10000  1.2%  50/s      3          3    2.4s   2.4s     2\n" +
		"sms-outbound      5/100  5.0%   1/s      0          0   1m01s   5.0s     0\n" +
		"idle              0/100  0.0%   5/s      0          0       -      -     0\n" +
		"! email: 2 dead letters (spillctl dlq list --queue email)\n" +
		"! sms-outbound: 5 jobs wait in the backlog and no worker has a free handler for them (start a worker for this queue, or more: every handler may be busy with admitted jobs)\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := formatQueues(nil); !strings.Contains(got, "no queues") {
		t.Fatalf("no queues: %q", got)
	}
}

func TestParseCounters(t *testing.T) {
	t.Parallel()
	text := `# HELP spillway_decisions_total Decisions.
# TYPE spillway_decisions_total counter
spillway_decisions_total{queue="email",verdict="admitted",reason=""} 10
spillway_decisions_total{queue="email",verdict="rejected",reason="queue-full"} 3
spillway_decisions_total{queue="email",verdict="rejected",reason="a \"quoted\", odd\\one"} 2
spillway_decisions_total{reason="x",queue="sms",verdict="queued"} 1e3
spillway_jobs_completed_total{queue="email",result="succeeded"} 40 1700000000000
spillway_jobs_completed_total{queue="email",result="dead"} 2
spillway_queue_depth{queue="email"} 120
spillway_decisions_total{queue="broken
`
	got := parseCounters(strings.NewReader(text))
	want := map[counterKey]float64{
		{metricDecisions, "email", "admitted"}: 10,
		{metricDecisions, "email", "rejected"}: 5,
		{metricDecisions, "sms", "queued"}:     1000,
		{metricCompleted, "email", ""}:         42,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v = %v, want %v", k, got[k], v)
		}
	}
}

func TestTopFrame(t *testing.T) {
	t.Parallel()
	prev := topSample{at: t0, queues: []spillway.QueueInfo{{Name: "email", Depth: 100, Capacity: 1000}}, counters: map[counterKey]float64{
		{metricDecisions, "email", "admitted"}: 100, {metricDecisions, "email", "rejected"}: 50, {metricCompleted, "email", ""}: 10,
	}}
	cur := topSample{at: t0.Add(2 * time.Second), queues: []spillway.QueueInfo{
		{Name: "email", Depth: 120, Capacity: 1000, Fill: 0.12, LeakRate: "50/s", LeakRateCurrent: 35, BacklogPullers: 1, OldestAgeMS: 500, EstimatedDrainMS: 2400},
		{Name: "new", Capacity: 10, LeakRate: "1/s"},
		{Name: "sms", Capacity: 10, LeakRate: "5/s", LeakRateCurrent: 5, LeakPausedMS: 800},
	}, counters: map[counterKey]float64{
		{metricDecisions, "email", "admitted"}: 300, {metricDecisions, "email", "rejected"}: 4, {metricCompleted, "email", ""}: 110,
	}}
	f := buildFrame("http://a:8080", &prev, cur)
	email := f.Queues[0]
	if *email.DepthPerSecond != 10 || *email.AdmittedPerSecond != 100 || *email.CompletedPerSecond != 50 || email.QueuedPerSecond != nil {
		t.Fatalf("rates %+v", email)
	}
	if *email.RejectedPerSecond != 2 { // the counter went back to 4: the admitter restarted
		t.Fatalf("rejected/s after a counter reset: %v", *email.RejectedPerSecond)
	}
	if f.Queues[1].DepthPerSecond != nil {
		t.Fatal("a queue new in this frame has a depth rate")
	}
	got := formatTop(f, time.Second, time.UTC)
	want := "spillway top — http://a:8080 — 12:00:05 — every 1.0s (Ctrl-C to quit)\n\n" +
		"QUEUE  DEPTH/CAP   FILL  DEPTH/s  LEAK  LEAK NOW  READY  IN FLIGHT  DONE/s  ADMIT/s  QUEUE/s  REJECT/s  OLDEST  DRAIN  DEAD\n" +
		"email   120/1000  12.0%    +10.0  50/s    35.0/s      0          0    50.0    100.0        -       2.0   500ms   2.4s     0\n" +
		"new         0/10   0.0%        -   1/s         -      0          0       -        -        -         -       -      -     0\n" +
		"sms         0/10   0.0%        -   5/s    paused      0          0       -        -        -         -       -      -     0\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	first := formatTop(buildFrame("http://a:8080", nil, cur), time.Second, time.UTC)
	if !strings.Contains(first, "email   120/1000  12.0%        -") {
		t.Fatalf("a first frame shows rates:\n%s", first)
	}
	down := formatTop(buildFrame("http://a:8080", &prev, topSample{at: t0, err: fmt.Errorf("cannot reach the admitter")}), time.Second, time.UTC)
	if !strings.Contains(down, "cannot reach the admitter\n(trying again every 1.0s)") {
		t.Fatalf("frame without an admitter:\n%s", down)
	}
}

// standIn is an HTTP admitter stand-in that answers by the X-Api-Key
// header and keeps what it was sent.
type standIn struct {
	mu       sync.Mutex
	payloads []string
	headers  []http.Header
	metrics  atomic.Int64 // calls of /metrics
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	problem := func(status int, typ, detail string) {
		w.Header().Set("Content-Type", spillway.ProblemContentType)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(spillway.Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail, RetryAfterMS: 2500})
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/queues/email/jobs":
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.payloads = append(s.payloads, string(body))
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		switch r.Header.Get("X-Api-Key") {
		case "", "a", "bench-0":
			w.Header().Set("Location", "/v1/jobs/j-admitted")
			w.WriteHeader(http.StatusAccepted)
			reply(spillway.SubmitReply{ID: "j-admitted", Queue: "email", Status: spillway.Admitted})
		case "q", "bench-1":
			nb := time.Now().Add(time.Hour)
			w.WriteHeader(http.StatusAccepted)
			reply(spillway.SubmitReply{ID: "j-queued", Queue: "email", Status: spillway.Queued, Position: 7, NotBefore: &nb})
		case "r", "bench-2":
			w.Header().Set("Retry-After", "3")
			problem(http.StatusTooManyRequests, spillway.ProblemQueueFull, "backlog full")
		default:
			problem(http.StatusUnauthorized, spillway.ProblemUnauthorized, "unknown API key")
		}
	case r.URL.Path == "/v1/jobs/j1":
		reply(jobStatus{ID: "j1", Queue: "email", State: "succeeded", Attempts: 1, FinishedAt: at(0)})
	case r.URL.Path == "/v1/queues":
		reply(spillway.QueueList{Queues: demoQueues})
	case r.URL.Path == "/v1/queues/email":
		reply(demoQueues[0])
	case r.URL.Path == "/metrics":
		n := s.metrics.Add(1)
		fmt.Fprintf(w, "spillway_decisions_total{queue=\"email\",verdict=\"admitted\",reason=\"\"} %d\n", 1000*n)
	default:
		problem(http.StatusNotFound, spillway.ProblemNotFound, "no such thing")
	}
}

func startStandIn(t *testing.T) (*standIn, string) {
	s := &standIn{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// spillctlEnv runs spillctl with an environment.
func spillctlEnv(t *testing.T, env map[string]string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

func TestSubmitHTTP(t *testing.T) {
	t.Parallel()
	s, url := startStandIn(t)
	env := map[string]string{"SPILLWAY_SERVER": url, "SPILLWAY_API_KEY": "sekret"}
	file := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		stdin string
		code  int
		out   string
		err   string
	}{
		{[]string{"--data", "hi", "--header", "X-Api-Key=a", "--cost", "3", "--idempotency-key", "order-1"}, "", 0, "admitted id=j-admitted\n", ""},
		{[]string{"--header", "X-Api-Key=q"}, "from stdin", 0, "queued  id=j-queued  position=7  not_before=", ""},
		{[]string{"--file", file, "--header", "X-Api-Key=r"}, "", exitRejected, "rejected retry after 2.5s (queue-full)\n", ""},
		{[]string{"--data", "x", "--header", "X-Api-Key=u"}, "", exitFailure, "", "401 Unauthorized: unknown API key (set --api-key or $SPILLWAY_API_KEY)"},
		{[]string{"--data", "x", "--queue", "nope"}, "", exitFailure, "", "404 Not Found: no such thing"},
		{[]string{"--data", "x", "--server", "http://127.0.0.1:1"}, "", exitFailure, "", "cannot reach the admitter at http://127.0.0.1:1: connection refused"},
		{[]string{"--data", "x", "--file", file}, "", exitUsage, "", "--data and --file both given"},
		{[]string{"--data", "x", "--via", "smtp"}, "", exitUsage, "", "--via \"smtp\""},
		{[]string{"--data", "x", "--queue", ""}, "", exitUsage, "", "--queue is required"},
		{[]string{"--data", "x", "--header", "nonsense"}, "", exitUsage, "", "want NAME=VALUE"},
	} {
		args := append([]string{"submit", "--queue", "email"}, c.args...)
		out, _, err := spillctlEnv(t, env, c.stdin, args...)
		code, msg := 0, ""
		if err != nil {
			code, msg = exitStatus(err)
		}
		if code != c.code || !strings.HasPrefix(out, c.out) || !strings.Contains(msg, c.err) {
			t.Errorf("%v: exit %d, out %q, err %q; want %d, %q, %q", c.args, code, out, msg, c.code, c.out, c.err)
		}
	}
	h := s.headers[0]
	if s.payloads[0] != "hi" || s.payloads[1] != "from stdin" || s.payloads[2] != `{"from":"file"}` ||
		h.Get("Authorization") != "Bearer sekret" || h.Get("Spillway-Cost") != "3" || h.Get("Idempotency-Key") != "order-1" {
		t.Fatalf("stand-in got payloads %q, first headers %v", s.payloads, h)
	}

	out, _, err := spillctlEnv(t, env, "", "submit", "--queue", "email", "--data", "x", "--header", "X-Api-Key=r", "--json")
	var rep spillway.SubmitReply
	if code, _ := exitStatus(err); code != exitRejected || json.Unmarshal([]byte(out), &rep) != nil || rep.Status != spillway.Rejected || rep.RetryAfterMS != 2500 || rep.Type != spillway.ProblemQueueFull {
		t.Fatalf("--json rejected: %v %s", err, out)
	}
}

func TestSubmitNATS(t *testing.T) {
	t.Parallel()
	ns := queuetest.Start(t)
	nc := ns.Connect(t)
	sub, err := nc.Subscribe(spillway.SubmitPrefix+"email", func(m *nats.Msg) {
		rep := spillway.SubmitReply{ID: "n1", Queue: "email", Status: spillway.Admitted}
		if m.Header.Get("X-Api-Key") == "r" {
			rep = spillway.SubmitReply{Queue: "email", Status: spillway.Rejected, RetryAfterMS: 400, Type: spillway.ProblemRateLimited}
		}
		if m.Header.Get(spillway.HeaderIdempotencyKey) != "k1" || string(m.Data) != "payload" {
			rep = spillway.SubmitReply{Queue: "email", Status: spillway.Failed, Error: fmt.Sprintf("got %v %q", m.Header, m.Data), Type: spillway.ProblemBadRequest}
		}
		r := nats.NewMsg(m.Reply)
		r.Header.Set(spillway.HeaderStatus, string(rep.Status))
		r.Data, _ = json.Marshal(rep)
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil { // the subscription is known to the server
		t.Fatal(err)
	}
	env := map[string]string{"SPILLWAY_NATS_URL": ns.URL()}
	base := []string{"submit", "--via", "nats", "--idempotency-key", "k1", "--data", "payload"}

	out, _, err := spillctlEnv(t, env, "", append(base, "--queue", "email")...)
	if err != nil || out != "admitted id=n1\n" {
		t.Fatalf("admitted: %v %q", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", append(base, "--queue", "email", "--header", "X-Api-Key=r")...)
	if code, _ := exitStatus(err); code != exitRejected || out != "rejected retry after 400ms (rate-limited)\n" {
		t.Fatalf("rejected: %v %q", err, out)
	}
	_, _, err = spillctlEnv(t, env, "", append(base, "--queue", "sms")...)
	if err == nil || !strings.Contains(err.Error(), "no admitter answers on spillway.submit.sms") {
		t.Fatalf("no responders: %v", err)
	}
}

func TestStatusAndQueues(t *testing.T) {
	t.Parallel()
	_, url := startStandIn(t)
	env := map[string]string{"SPILLWAY_SERVER": url}
	out, _, err := spillctlEnv(t, env, "", "status", "j1")
	if err != nil || !strings.Contains(out, "job j1\n") || !strings.Contains(out, "succeeded") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", "status", "--json", "j1")
	if err != nil || !strings.Contains(out, `"state": "succeeded"`) {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if _, _, err := spillctlEnv(t, env, "", "status", "j404"); err == nil || !strings.Contains(err.Error(), `knows no job "j404"`) {
		t.Fatalf("status of an unknown job: %v", err)
	}
	if _, _, err := spillctlEnv(t, env, "", "status"); err == nil || !strings.Contains(err.Error(), "want one job ID") {
		t.Fatalf("status without an id: %v", err)
	}
	out, _, err = spillctlEnv(t, env, "", "queues")
	if err != nil || out != formatQueues(demoQueues) {
		t.Fatalf("queues: %v\n%s", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", "queues", "email", "--json")
	var qi spillway.QueueInfo
	if err != nil || json.Unmarshal([]byte(out), &qi) != nil || qi.Depth != 120 {
		t.Fatalf("queues email --json: %v\n%s", err, out)
	}
	if _, _, err := spillctlEnv(t, env, "", "queues", "sms"); err == nil || !strings.Contains(err.Error(), `has no queue "sms"`) {
		t.Fatalf("queues of an unknown queue: %v", err)
	}
}

func TestTopOnce(t *testing.T) {
	t.Parallel()
	_, url := startStandIn(t)
	env := map[string]string{"SPILLWAY_SERVER": url}
	out, _, err := spillctlEnv(t, env, "", "top", "--once", "--interval", "100ms")
	if err != nil || strings.Contains(out, "\x1b[") || !strings.Contains(out, "spillway top — "+url) || !strings.Contains(out, "ADMIT/s") {
		t.Fatalf("top --once: %v\n%q", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", "top", "--once", "--interval", "100ms", "--json")
	var f topFrame
	if err != nil || json.Unmarshal([]byte(out), &f) != nil || len(f.Queues) != 3 {
		t.Fatalf("top --once --json: %v\n%s", err, out)
	}
	// 1000 more admitted decisions in about 100ms.
	if r := f.Queues[0].AdmittedPerSecond; f.Queues[0].Name != "email" || r == nil || *r < 1000 || *r > 20000 {
		t.Fatalf("email's admitted rate: %+v", f.Queues[0])
	}
	if _, _, err := spillctlEnv(t, map[string]string{"SPILLWAY_SERVER": "http://127.0.0.1:1"}, "", "top", "--once"); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("top --once without an admitter: %v", err)
	}

	// The live view redraws until it is interrupted, and then exits 0.
	ctx, cancel := context.WithCancel(context.Background())
	w := &frameCounter{frames: make(chan struct{}, 100)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"top", "--interval", "20ms"}, func(k string) string { return env[k] }, strings.NewReader(""), w, io.Discard)
	}()
	for range 3 {
		select {
		case <-w.frames:
		case <-time.After(10 * time.Second):
			t.Fatal("no frames from the live view")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("live top: %v", err)
	}
}

// frameCounter signals every cleared screen written to it.
type frameCounter struct{ frames chan struct{} }

func (f *frameCounter) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte(clearScreen)) {
		f.frames <- struct{}{}
	}
	return len(p), nil
}

func TestBench(t *testing.T) {
	t.Parallel()
	s, url := startStandIn(t)
	out, stderr, err := spillctlEnv(t, map[string]string{"SPILLWAY_SERVER": url}, "",
		"bench", "--queue", "email", "--callers", "4", "--count", "60", "--keys", "3", "--key-header", "X-Api-Key", "--payload-bytes", "16", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var sum benchSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Keys bench-0, bench-1, bench-2: admitted, queued, rejected.
	v := sum.Verdicts
	if sum.Mode != "closed" || sum.Sent != 60 || v.Admitted != 20 || v.Queued != 20 || v.RejectedBy["queue-full"] != 20 || v.Errors != 0 || sum.LatencyMS.P50 <= 0 {
		t.Fatalf("summary %+v", sum)
	}
	// In a test, spillctl shares its process with the stand-in: only
	// that the figure is there can be checked.
	_, hasCPU := ownCPU()
	if hasCPU && sum.CPUPerJobUS <= 0 {
		t.Fatalf("cpu_us_per_job %v, want it positive:\n%s", sum.CPUPerJobUS, out)
	}
	keys := map[string]int{}
	for _, h := range s.headers {
		keys[h.Get("X-Api-Key")]++
	}
	if len(s.payloads) != 60 || len(s.payloads[0]) != 16 || keys["bench-0"] != 20 || keys["bench-1"] != 20 || keys["bench-2"] != 20 {
		t.Fatalf("stand-in got %d payloads of %d bytes, keys %v", len(s.payloads), len(s.payloads[0]), keys)
	}

	out, _, err = spillctlEnv(t, map[string]string{"SPILLWAY_SERVER": url}, "",
		"bench", "--queue", "email", "--rate", "2000/s", "--count", "100", "--keys", "0", "--quiet")
	if err != nil || !strings.Contains(out, "open loop at 2000/s") || !strings.Contains(out, "verdicts    admitted 100  queued 0  rejected 0  errors 0") ||
		!strings.Contains(out, "p99.9") || !strings.Contains(out, "from each job's scheduled send time") ||
		(hasCPU && !strings.Contains(out, "µs per job (spillctl's user + system, warm-up included)")) {
		t.Fatalf("open-loop bench: %v\n%s", err, out)
	}
	_, _, err = spillctlEnv(t, nil, "", "bench", "--server", "http://127.0.0.1:1", "--count", "5", "--quiet")
	if err == nil || !strings.Contains(err.Error(), "every job failed (connection refused 5): is the admitter running") {
		t.Fatalf("bench without an admitter: %v", err)
	}
	_, _, err = spillctlEnv(t, map[string]string{"SPILLWAY_SERVER": url}, "", "bench", "--queue", "email", "--count", "5", "--key-header", "X-Api-Key", "--keys", "0", "--header", "X-Api-Key=bad", "--quiet")
	if err == nil || err.Error() != "spillctl bench: every job failed (http 401 unauthorized 5)" {
		t.Fatalf("bench with a bad key: %v", err)
	}
	for _, c := range [][]string{{"--callers", "2", "--rate", "5/s"}, {"--rate", "fast"}, {"--keys", "-1"}, {"--via", "pigeon"}} {
		if _, _, err := spillctlEnv(t, nil, "", append([]string{"bench"}, c...)...); err == nil {
			t.Errorf("bench %v: no error", c)
		} else if code, _ := exitStatus(err); code != exitUsage {
			t.Errorf("bench %v: exit %d, want %d", c, code, exitUsage)
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	out, _, err := spillctl(t, "", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"submit", "status", "cancel", "queues", "pause", "resume", "top", "dlq", "bench", "simulate", "probe"} {
		if !strings.Contains(out, "\n  "+cmd+" ") {
			t.Errorf("spillctl --help does not list %s", cmd)
		}
		help, _, err := spillctl(t, "", cmd, "--help")
		if err != nil || !strings.HasPrefix(help, "Usage: spillctl "+cmd) {
			t.Errorf("spillctl %s --help: %v\n%s", cmd, err, help)
		}
	}
	if _, _, err := spillctl(t, ""); !errorsIsUsage(err) {
		t.Errorf("spillctl without a command: %v", err)
	}
}

func errorsIsUsage(err error) bool {
	code, _ := exitStatus(err)
	return err != nil && code == exitUsage
}
