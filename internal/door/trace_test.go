package door_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
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

// A batch's jobs whose trace context NATS headers cannot carry — a NUL in
// tracestate, a control character in traceparent — are taken, their
// trace context dropped as the W3C recommendation says of values it
// cannot parse, and they run: before, they were stored with the value
// and failed every try, then were dead-lettered.
func TestBatchTraceContextRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, traceConfig, setupOptions{})
	ran := runRecordingWorker(t, b, "q")
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
		if rec := b.jobState(t, res.ID, spillway.StateSucceeded, 20*time.Second); rec.Attempts != 1 {
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
