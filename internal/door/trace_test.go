package door_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const traceConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 100/s, burst: 100}
    backlog: {capacity: 10, leak_rate: 100/s}
`

const goodParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A batch's jobs whose trace context no header can carry — a NUL in
// tracestate, a control character in traceparent — are taken, their
// trace context dropped as the W3C recommendation says of values it
// cannot parse, and they run on a worker with an HTTP handler, which
// forwards the trace context: before, they were stored with the value,
// and every try failed to build the handler's request until the job was
// dead-lettered.
func TestBatchTraceContextRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, traceConfig, setupOptions{})
	ran := &starts{at: map[string]time.Time{}}
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.mu.Lock()
		ran.at[r.Header.Get(spillway.HeaderJobID)] = time.Now()
		ran.mu.Unlock()
	}))
	t.Cleanup(downstream.Close)
	h, err := handler.HTTP(handler.HTTPConfig{URL: downstream.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runHandlerWorker(t, b, "q", retry.Policy{MaxAttempts: 2, Initial: time.Millisecond, Max: time.Millisecond}, h)
	jobs := []map[string]any{
		{"headers": map[string]string{"X-Client": "a", "traceparent": goodParent, "tracestate": "vendor=a\x00b"}, "payload": "nul in tracestate"},
		{"headers": map[string]string{"X-Client": "b", "traceparent": goodParent[:10] + "\x01" + goodParent[11:]}, "payload": "control in traceparent"},
		{"headers": map[string]string{"X-Client": "c", "traceparent": goodParent, "tracestate": "vendor=a,other=b"}, "payload": "valid"},
	}
	body, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	r := b.do(t, http.MethodPost, "/v1/queues/q/jobs:batch", bytes.NewReader(body), "Content-Type", spillway.BatchJSON)
	var rep spillway.BatchReply
	if err := json.Unmarshal(r.body, &rep); r.code != http.StatusOK || err != nil || len(rep.Results) != len(jobs) {
		t.Fatalf("the batch: %d %s", r.code, r.body)
	}
	for i, res := range rep.Results {
		if res.Status != spillway.Admitted {
			t.Fatalf("job %d: %+v, want admitted", i, res.SubmitReply)
		}
		if rec := b.jobState(t, res.ID, spillway.StateSucceeded, 10*time.Second); rec.Attempts != 1 {
			t.Errorf("job %d (%s): %+v, want one try that succeeded", i, jobs[i]["payload"], rec)
		}
		if _, ok := ran.of(res.ID); !ok {
			t.Errorf("job %d: the handler never ran it", i)
		}
	}
}

// A single submission keeps a valid traceparent, drops an invalid
// tracestate beside it, and drops both with an invalid traceparent.
func TestTraceContextKeptOrDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, traceConfig, setupOptions{})
	for _, c := range []struct {
		client, parent, state string
		wantParent, wantState string
	}{
		{"valid", goodParent, "vendor=x", goodParent, "vendor=x"},
		{"bad-state", goodParent, "vendor=é", goodParent, ""},
		{"bad-parent", "00-00000000000000000000000000000000-b7ad6b7169203331-01", "vendor=x", "", ""},
		{"upper-case", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "", "", ""},
		{"version-00-longer", goodParent + "-x", "", "", ""},
	} {
		if r := b.post(t, "q", []byte(c.client), "X-Client", c.client, "traceparent", c.parent, "tracestate", c.state); r.code != http.StatusAccepted {
			t.Fatalf("%s: %d %s, want 202", c.client, r.code, r.body)
		}
		j, ok := b.jobOfKey(t, "q", queue.Ready, c.client)
		if !ok || j.Header.Get("traceparent") != c.wantParent || j.Header.Get("tracestate") != c.wantState {
			t.Errorf("%s: the job's trace context %q, %q (found %v); want %q, %q", c.client,
				j.Header.Get("traceparent"), j.Header.Get("tracestate"), ok, c.wantParent, c.wantState)
		}
	}
}

// runHandlerWorker runs a worker of queue q with handler h and retry
// policy p (zero: the default), its events feeding the job-status records
// as a worker process's do, until the test ends.
func runHandlerWorker(t *testing.T, b *testBundle, q string, p retry.Policy, h worker.Handler) {
	t.Helper()
	rec := jobstatus.NewRecorder(b.status, nil, 0)
	cfg := b.Config.Queue(q).Backlog
	cfg.Memory = true // as the test kit made the streams
	w, err := worker.NewWorker(b.JS, worker.WorkerConfig{Queue: cfg, FetchWait: 100 * time.Millisecond, Observe: rec.Observe, Retry: p}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done, recDone := make(chan error, 1), make(chan error, 1)
	go func() { recDone <- rec.Run(ctx) }()
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for _, c := range []chan error{done, recDone} {
			if err := <-c; err != nil {
				t.Errorf("worker: %v", err)
			}
		}
	})
}
