package door_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// benchDoor is an HTTP door on an embedded JetStream, without job-status
// records.
type benchDoor struct {
	srv    *httptest.Server
	client *http.Client
}

func setupB(b *testing.B, yaml string) *benchDoor {
	b.Helper()
	ns := queuetest.Start(b)
	core := admittest.NewCore(b, ns.Connect(b), yaml, nil)
	a, err := admit.New(core.Config, core.Options())
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(door.NewHTTP(door.HTTPOptions{Admitter: a, JS: core.JS, Ready: func() error { return nil }}))
	b.Cleanup(srv.Close)
	c := srv.Client()
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = 128
	return &benchDoor{srv: srv, client: c}
}

// benchConfig admits every job into a READY that holds them all.
const benchConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1000000/s, burst: 1000000, nodelay: true}
    backlog: {capacity: 1000, leak_rate: 1/s}
    ready: {capacity: 100000000}
`

// BenchmarkHTTPSubmit compares single submissions with batches through
// the HTTP door in one process (embedded JetStream, memory store), 64
// callers each: jobs/s is the figure to compare. scripts/bench-batch
// measures the running system.
func BenchmarkHTTPSubmit(b *testing.B) {
	for _, size := range []int{0, 100} {
		name := "single"
		if size > 0 {
			name = fmt.Sprintf("batch=%d", size)
		}
		b.Run(name, func(b *testing.B) {
			bb := setupB(b, benchConfig)
			var body []byte
			if size > 0 {
				jobs := make([]string, size)
				for i := range jobs {
					jobs[i] = fmt.Sprintf(`{"headers": {"X-Client": "c%d"}, "payload_base64": "%s"}`, i%1000, strings.Repeat("QUJD", 64))
				}
				body = batchBody(false, jobs...)
			}
			payload := bytes.Repeat([]byte("ABC"), 64)
			var jobsDone atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					var req *http.Request
					if size == 0 {
						req, _ = http.NewRequestWithContext(b.Context(), http.MethodPost, bb.srv.URL+"/v1/queues/q/jobs", bytes.NewReader(payload))
						req.Header.Set("X-Client", fmt.Sprintf("c%d", n%1000))
					} else {
						req, _ = http.NewRequestWithContext(b.Context(), http.MethodPost, bb.srv.URL+"/v1/queues/q/jobs:batch", bytes.NewReader(body))
						req.Header.Set("Content-Type", spillway.BatchJSON)
					}
					n++
					resp, err := bb.client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 300 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
					jobsDone.Add(int64(max(size, 1)))
				}
			})
			b.ReportMetric(float64(jobsDone.Load())/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
