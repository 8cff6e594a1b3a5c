package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// floodConfig is `admitter --dev` with two drained queues, a and b, whose
// backlogs are filled before the flood, and an admit-only queue, flood,
// that refuses all but a job or two of the uploads: what the admitter
// holds is then the uploads themselves, not the jobs JetStream stores.
const floodConfig = `
worker: {concurrency: 8, grace_period: 5s}
queues:
  - name: a
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 1}
    backlog: {capacity: 100000, leak_rate: %[2]d/s}
    handler: {http: {url: "%[1]s/a", timeout: 5s}}
  - name: b
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 1}
    backlog: {capacity: 100000, leak_rate: %[2]d/s}
    handler: {http: {url: "%[1]s/b", timeout: 5s}}
  - name: flood
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 1}
    backlog: {capacity: 1, leak_rate: 1/s}
`

const (
	// floodUploads batches of floodJobs jobs of floodPayload bytes each:
	// 16 MB, just under the batch body limit of 16 × http.max_body_bytes
	// (1 MiB, its default).
	floodUploads = 60
	floodJobs    = 16
	floodPayload = 1_000_000
	// floodLeak is each drained queue's leak rate, in jobs a second.
	floodLeak = 20
	// floodInflight is http.max_inflight_bytes' default (128 MiB).
	floodInflight = 128 << 20
	// floodRSSBound bounds the admitter's peak resident set: its resident
	// set before the flood, plus floodRSSFactor times the bytes its
	// uploads may hold at once. The factor is measured (docs/reliability.md):
	// one copy of each upload being read, the Go heap's growth target
	// (GOGC=100: twice the live heap) and the embedded JetStream's share.
	floodRSSFactor = 3
)

// TestFloodOfBatchUploads: 60 batch uploads of 16 MB at once, on an
// `admitter --dev` whose two queues are being drained. The admitter's
// resident set stays within its bound (what it held before, plus 3 ×
// http.max_inflight_bytes); neither drain loses its lease, and both go on
// leaking while the uploads arrive; every upload is answered, with its
// jobs' answers or a 503 that says when to come back — no other status,
// no hang. (A shed upload may see its connection closed while it is still
// sending, before the 503; the door counts it as shed all the same.)
func TestFloodOfBatchUploads(t *testing.T) {
	hook := newWebhook(t)
	cfgPath := writeFile(t, "spillway.yaml", fmt.Sprintf(floodConfig, hook.srv.URL, floodLeak))
	adm := start(t, "admitter-flood", bins.admitter, "--dev", "--config", cfgPath, "--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
	pid := adm.cmd.Process.Pid
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: floodUploads}}
	t.Cleanup(client.CloseIdleConnections)
	base := "http://" + adm.addr

	// Fill both drained queues with 1,000 small jobs each: 50 s of work at
	// 20/s, longer than the test.
	for _, q := range []string{"a", "b"} {
		jobs := make([]string, spillway.MaxBatchJobs)
		for i := range jobs {
			jobs[i] = fmt.Sprintf(`{"payload": "job %d"}`, i)
		}
		st, rep, _ := floodPost(client, base, q, []byte("["+strings.Join(jobs, ",")+"]"))
		if st != http.StatusOK {
			t.Fatalf("filling queue %s: status %d", q, st)
		}
		accepted := 0
		for _, r := range rep.Results {
			if r.Status == spillway.Admitted || r.Status == spillway.Queued {
				accepted++
			}
		}
		if accepted < spillway.MaxBatchJobs-10 {
			t.Fatalf("filling queue %s: %d of %d jobs accepted", q, accepted, spillway.MaxBatchJobs)
		}
	}
	// Both drains are leading once each queue's jobs reach the webhook.
	waitFor(t, 20*time.Second, "both queues' drains to run jobs", func() bool {
		n := hitsByPath(hook, time.Time{}, time.Now())
		return n["/a"] > 0 && n["/b"] > 0
	})

	plain, encoded := floodBodies()
	rssBefore := procStatus(t, pid, "VmRSS")

	var peak atomic.Int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if kb, err := procStatusKB(pid, "VmRSS"); err == nil && int64(kb) > peak.Load() {
				peak.Store(int64(kb))
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	type result struct {
		status     int
		retryAfter string
		results    int
		err        error
	}
	results := make([]result, floodUploads)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range floodUploads {
		body := plain
		if i%2 == 1 {
			body = encoded
		}
		wg.Go(func() {
			<-gate
			st, rep, h := floodPost(client, base, "flood", body)
			results[i] = result{status: st, results: len(rep.Results), err: rep.err}
			if h != nil {
				results[i].retryAfter = h.Get("Retry-After")
			}
		})
	}
	began := time.Now()
	close(gate)
	wg.Wait()
	ended := time.Now()
	close(stopSampling)
	<-sampled
	took := ended.Sub(began)
	time.Sleep(2 * time.Second)
	rssAfter := procStatus(t, pid, "VmRSS")
	hwm := procStatus(t, pid, "VmHWM")

	answered, shed, cut := 0, 0, 0
	for i, r := range results {
		switch {
		case errors.Is(r.err, syscall.EPIPE) || errors.Is(r.err, syscall.ECONNRESET):
			// Shed before its body was read: the server answers 503 and
			// closes the connection, and a client still writing the
			// body may see the closed connection before the answer.
			// The door's counter below must count it as shed.
			cut++
		case r.err != nil:
			t.Errorf("upload %d: %v", i, r.err)
		case r.status == http.StatusOK && r.results == floodJobs:
			answered++
		case r.status == http.StatusServiceUnavailable && r.retryAfter != "":
			shed++
		default:
			t.Errorf("upload %d: status %d, Retry-After %q, %d results: want 200 with %d results, or 503 with Retry-After",
				i, r.status, r.retryAfter, r.results, floodJobs)
		}
	}
	drained := hitsByPath(hook, began, ended)
	figure(t, "%d uploads of %d MB at once in %v: %d answered, %d shed (503, Retry-After), %d cut off while sending",
		floodUploads, len(plain)/1_000_000, took.Round(time.Millisecond), answered, shed, cut)
	figure(t, "admitter RSS: %d MiB before, peak %d MiB (sampled every 10 ms; VmHWM %d MiB), %d MiB 2 s after",
		rssBefore>>10, peak.Load()>>10, hwm>>10, rssAfter>>10)
	figure(t, "drained during the flood: a %d, b %d jobs in %v (leak %d/s each)",
		drained["/a"], drained["/b"], took.Round(time.Millisecond), floodLeak)

	// The door counted what it shed, and holds nothing now.
	m := afScrape(t, client, adm.addr)
	if got := m.sum("spillway_http_requests_shed_total"); got != float64(shed+cut) {
		t.Errorf("spillway_http_requests_shed_total = %v, want the %d uploads answered 503 and the %d whose connection closed while they sent", got, shed, cut)
	}
	if got := m.sum("spillway_http_inflight_bytes"); got != 0 {
		t.Errorf("spillway_http_inflight_bytes = %v once every upload was answered, want 0", got)
	}

	bound := int64(rssBefore) + floodRSSFactor*floodInflight>>10
	if int64(hwm) > bound {
		t.Errorf("the admitter's peak resident set was %d MiB; want at most %d MiB (%d MiB before + %d × http.max_inflight_bytes)",
			hwm>>10, bound>>10, rssBefore>>10, floodRSSFactor)
	}
	// The drains kept their leases: no lease lost, and each queue leaked
	// during the flood — at least half its rate (the machine is shared;
	// a drain stalled for its lease's 5 s would fall below it).
	b, err := os.ReadFile(adm.log)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("lost the lease")); n > 0 {
		t.Errorf("the admitter's drains lost their lease %d times during the flood", n)
	}
	want := int(floodLeak * took.Seconds() / 2)
	for _, q := range []string{"/a", "/b"} {
		if drained[q] < want {
			t.Errorf("queue %s drained %d jobs during the %v flood; want at least %d (half its leak rate)", q[1:], drained[q], took.Round(time.Millisecond), want)
		}
	}
}

// floodBodies are two batches of floodJobs jobs of floodPayload bytes
// each: one with text payloads, one with base64 payloads (of
// floodPayload encoded bytes).
func floodBodies() (plain, encoded []byte) {
	text := strings.Repeat("x", floodPayload)
	bin := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfe}, floodPayload/4*3))
	var p, e bytes.Buffer
	p.WriteByte('[')
	e.WriteByte('[')
	for i := range floodJobs {
		if i > 0 {
			p.WriteByte(',')
			e.WriteByte(',')
		}
		fmt.Fprintf(&p, `{"payload": "%s"}`, text)
		fmt.Fprintf(&e, `{"payload_base64": "%s"}`, bin)
	}
	p.WriteByte(']')
	e.WriteByte(']')
	return p.Bytes(), e.Bytes()
}

// floodReply is a batch's answer, or why it could not be read.
type floodReply struct {
	spillway.BatchReply
	err error
}

// floodPost posts a JSON batch to queue q: its status, its answer and its
// headers (nil on a transport error, which is in the reply's err).
func floodPost(client *http.Client, base, q string, body []byte) (int, floodReply, http.Header) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/queues/"+q+"/jobs:batch", bytes.NewReader(body))
	if err != nil {
		return 0, floodReply{err: err}, nil
	}
	req.Header.Set("Content-Type", spillway.BatchJSON)
	resp, err := client.Do(req)
	if err != nil {
		return 0, floodReply{err: err}, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, floodReply{err: err}, resp.Header
	}
	var rep floodReply
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &rep.BatchReply); err != nil {
			rep.err = fmt.Errorf("reading the answer %.200q: %w", b, err)
		}
	}
	return resp.StatusCode, rep, resp.Header
}

// hitsByPath counts the webhook's hits per path that arrived in [from, to).
func hitsByPath(w *webhook, from, to time.Time) map[string]int {
	n := map[string]int{}
	for _, h := range w.snapshot() {
		if !h.At.Before(from) && h.At.Before(to) {
			n[h.Path]++
		}
	}
	return n
}

// procStatus is a field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	kb, err := procStatusKB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

func procStatusKB(pid int, field string) (int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
