package door_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/metrictest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// boundedConfig: bodies of at most 1,000 bytes (16,000 for a batch),
// 1,500 bytes of them read at once; every job admitted.
const boundedConfig = `
http: {max_body_bytes: 1000, max_inflight_bytes: 1500, write_timeout: 1s}
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1000/s, burst: 1000}
    backlog: {capacity: 100, leak_rate: 1/s}
`

// boundedDoor is the HTTP door of b with its metrics in reg, served over
// TCP; connState, if set, sees its connections' states.
func boundedDoor(t *testing.T, b *testBundle, connState func(net.Conn, http.ConnState)) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := httptest.NewUnstartedServer(door.NewHTTP(door.HTTPOptions{Admitter: b.admitter, JS: b.JS, Status: b.status,
		Ready: func() error { return nil }, Registerer: reg}))
	srv.Config.ConnState = connState
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, reg
}

// TestHTTPInflightBound: while a submission of 1,000 bytes is being read,
// under a bound of 1,500, a second of 1,000 bytes and a batch of 600 wait
// for room and are answered 503 unavailable with Retry-After; one of 400
// fits and is admitted, and one over the body limit is still 413. Once
// the first is answered, its bytes are free again.
func TestHTTPInflightBound(t *testing.T) {
	t.Parallel()
	b := setup(t, boundedConfig, setupOptions{})
	srv, reg := boundedDoor(t, b, nil)
	client := apitest.Client(t, srv.Client())
	post := func(path string, body []byte, ct string) response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResponse(t, resp)
	}

	// The first submission announces 1,000 bytes and sends 10.
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/queues/q/jobs", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1000
	first := make(chan response, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			first <- response{}
			return
		}
		first <- readResponse(t, resp)
	}()
	if _, err := pw.Write(bytes.Repeat([]byte("a"), 10)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first submission's 1,000 bytes to be reserved", func() bool {
		return metrictest.Sum(t, reg, "spillway_http_inflight_bytes") == 1000
	})

	for _, c := range []struct {
		path, ct string
		size     int
	}{
		{"/v1/queues/q/jobs", "", 1000},
		{"/v1/queues/q/jobs:batch", spillway.BatchJSON, 600},
	} {
		body := []byte(`[{"payload": "` + strings.Repeat("b", c.size-17) + `"}]`)
		r := post(c.path, body, c.ct)
		if r.code != http.StatusServiceUnavailable || r.problem.Type != spillway.ProblemUnavailable ||
			r.header.Get("Retry-After") != "1" || r.problem.RetryAfterMS != 1000 || r.problem.Queue != "q" {
			t.Errorf("%s of %d bytes with 1,000 of 1,500 in flight: %d %s (Retry-After %q), want 503 unavailable, Retry-After 1",
				c.path, len(body), r.code, r.body, r.header.Get("Retry-After"))
		}
	}
	if r := post("/v1/queues/q/jobs", bytes.Repeat([]byte("c"), 400), ""); r.code != http.StatusAccepted {
		t.Errorf("400 bytes with 1,000 of 1,500 in flight: %d %s, want 202", r.code, r.body)
	}
	if r := post("/v1/queues/q/jobs", bytes.Repeat([]byte("d"), 1001), ""); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("1,001 bytes, over http.max_body_bytes: %d %s, want 413", r.code, r.body)
	}

	if _, err := pw.Write(bytes.Repeat([]byte("a"), 990)); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	if r := <-first; r.code != http.StatusAccepted {
		t.Errorf("the first submission: %d %s, want 202", r.code, r.body)
	}
	if r := post("/v1/queues/q/jobs", bytes.Repeat([]byte("e"), 1000), ""); r.code != http.StatusAccepted {
		t.Errorf("1,000 bytes once the first was answered: %d %s, want 202", r.code, r.body)
	}
	if got := metrictest.Sum(t, reg, "spillway_http_inflight_bytes"); got != 0 {
		t.Errorf("spillway_http_inflight_bytes = %v after every answer, want 0", got)
	}
	if got := metrictest.Sum(t, reg, "spillway_http_requests_shed_total"); got != 2 {
		t.Errorf("spillway_http_requests_shed_total = %v, want 2", got)
	}
}

// TestHTTPWriteDeadline: clients that pipeline GET /openapi.json a
// thousand times and never read the answers are disconnected once
// writing an answer has taken http.write_timeout (1s); a client that
// reads is served as before.
func TestHTTPWriteDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, boundedConfig, setupOptions{})
	var closed atomic.Int64
	srv, _ := boundedDoor(t, b, func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Add(1)
		}
	})
	const conns, pipelined = 10, 1000
	requests := []byte(strings.Repeat("GET /openapi.json HTTP/1.1\r\nHost: spillway\r\n\r\n", pipelined))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			_ = c.Close()
		}
		wg.Wait()
	})
	began := time.Now()
	for range conns {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
		wg.Go(func() { _, _ = c.Write(requests) }) // never read
	}
	waitUntil(t, "the server to close the connections that do not read", func() bool { return closed.Load() == conns })
	t.Logf("%d connections that do not read closed %v after they opened (http.write_timeout 1s)", conns, time.Since(began).Round(10*time.Millisecond))

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/openapi.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if r := readResponse(t, resp); r.code != http.StatusOK || len(r.body) == 0 {
		t.Errorf("GET /openapi.json by a client that reads: %d, %d bytes", r.code, len(r.body))
	}
}

// waitUntil polls cond until it holds, or fails after 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
