package admitterd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Admitting a job stores the job and nothing else: over both doors, one
// job at a time and in batches, every JetStream store the admitter makes
// — READY, the job status buckets, every other stream of the account —
// adds up to exactly one per admitted job. The count is every stream's
// last sequence after the admitter has stopped (its asynchronous writes
// flushed) less what it was before the first submission.
func TestStoresPerAdmittedJob(t *testing.T) {
	t.Parallel()
	const singles, batch = 20, 30
	srv := queuetest.Start(t)
	cfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {url: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: token_bucket, rate: 1000/s, burst: 1000}]
    backlog: {capacity: 1000, leak_rate: 1/m}
`, srv.URL()))
	s, err := admitterd.Start(t.Context(), admitterd.Options{Config: cfg, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	t.Cleanup(stop)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	before := lastSeqs(t, js)

	hc := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	post := func(path, body string) []byte {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.HTTPAddr()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Client", "a")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
			t.Fatalf("POST %s: %d: %v", path, resp.StatusCode, err)
		}
		if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
		}
		return raw
	}
	request := func(subject string, body []byte) []byte {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set("X-Client", "a")
		m.Data = body
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		return resp.Data
	}
	admitted := func(how string, raw []byte) {
		t.Helper()
		var rep spillway.SubmitReply
		if err := json.Unmarshal(raw, &rep); err != nil || rep.Status != spillway.Admitted {
			t.Fatalf("%s: %s (%v), want admitted", how, raw, err)
		}
	}
	allAdmitted := func(how string, raw []byte) {
		t.Helper()
		var rep spillway.BatchReply
		if err := json.Unmarshal(raw, &rep); err != nil || len(rep.Results) != batch {
			t.Fatalf("%s: %s (%v), want %d results", how, raw, err, batch)
		}
		for i, r := range rep.Results {
			if r.Status != spillway.Admitted {
				t.Fatalf("%s: job %d %s, want admitted", how, i, r.Status)
			}
		}
	}
	jobs := make([]string, batch)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"headers": {"X-Client": "a"}, "payload": "job %d"}`, i)
	}
	batchBody := "[" + strings.Join(jobs, ",") + "]"

	for i := range singles {
		admitted("HTTP", post("/v1/queues/q/jobs", fmt.Sprint("http ", i)))
		admitted("NATS", request(spillway.SubmitPrefix+"q", []byte(fmt.Sprint("nats ", i))))
	}
	allAdmitted("an HTTP batch", post("/v1/queues/q/jobs:batch", batchBody))
	allAdmitted("a NATS batch", request(spillway.SubmitBatchPrefix+"q", []byte(batchBody)))
	stop() // its asynchronous writes are flushed

	after := lastSeqs(t, js)
	var stores uint64
	for name, seq := range after {
		if d := seq - before[name]; d > 0 {
			stores += d
			t.Logf("%s: %d stores", name, d)
		}
	}
	n := 2*singles + 2*batch
	if per := float64(stores) / float64(n); stores != uint64(n) {
		t.Errorf("%d stores for %d admitted jobs: %.2f a job, want 1.00", stores, n, per)
	}
}

// lastSeqs is every stream's last sequence, by name.
func lastSeqs(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	l := js.ListStreams(t.Context())
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
