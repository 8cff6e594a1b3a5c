package door_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// batchConfig: per X-Client, a key's first job is admitted, its next two
// queued a minute apart, the fourth refused.
const batchConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2, delay: 0}
    backlog: {capacity: 100, leak_rate: 1/m}
`

// batchBody is a batch of jobs as JSON objects, joined as a JSON array or
// as NDJSON.
func batchBody(ndjson bool, jobs ...string) []byte {
	if ndjson {
		return []byte(strings.Join(jobs, "\n") + "\n")
	}
	return []byte("[" + strings.Join(jobs, ",\n") + "]")
}

// batchJobs: client a four times (admitted, queued, queued, rate
// limited), a job whose cost is not a number, a binary payload for client
// b, and a repeat of a's second job's idempotency key.
var batchJobs = []string{
	`{"headers": {"X-Client": "a"}, "payload": "one"}`,
	`{"headers": {"x-client": "a", "Idempotency-Key": "k-2", "Spillway-Priority": "high"}, "payload": "two"}`,
	`{"headers": {"X-Client": "a", "Spillway-Cost": "1"}, "payload": "three"}`,
	`{"headers": {"X-Client": "a"}, "payload": "four"}`,
	`{"headers": {"X-Client": "a", "Spillway-Cost": "two"}, "payload": "five"}`,
	`{"headers": {"X-Client": "b"}, "payload_base64": "AP+A"}`,
	`{"headers": {"x-client": "a", "idempotency-key": "k-2", "spillway-priority": "HIGH"}, "payload": "two"}`,
}

// checkBatchReply checks the answers to batchJobs, in order.
func checkBatchReply(t *testing.T, rep spillway.BatchReply) {
	t.Helper()
	if rep.Queue != "q" || len(rep.Results) != len(batchJobs) {
		t.Fatalf("reply for queue %q with %d results, want q and %d: %+v", rep.Queue, len(rep.Results), len(batchJobs), rep)
	}
	r := rep.Results
	want := []spillway.Status{spillway.Admitted, spillway.Queued, spillway.Queued, spillway.Rejected, spillway.Failed, spillway.Admitted, spillway.Queued}
	for i, w := range want {
		if r[i].Status != w || r[i].Queue != "q" {
			t.Errorf("job %d: %+v, want %s", i, r[i], w)
		}
	}
	if r[1].NotBefore == nil || r[2].NotBefore == nil || r[2].NotBefore.Sub(*r[1].NotBefore) != time.Minute {
		t.Errorf("queued jobs' not_before %v and %v: want a minute apart", r[1].NotBefore, r[2].NotBefore)
	}
	if r[1].Position == 0 || r[1].EstimatedStart == nil {
		t.Errorf("queued job 1: %+v, want a position and an estimated start", r[1])
	}
	if r[3].Type != spillway.ProblemRateLimited || r[3].RetryAfterMS <= 0 {
		t.Errorf("job 3: %+v, want rate-limited with retry_after_ms", r[3])
	}
	if r[4].Type != spillway.ProblemBadCost || !strings.Contains(r[4].Error, spillway.HeaderCost) {
		t.Errorf("job 4: %+v, want bad-cost naming %s", r[4], spillway.HeaderCost)
	}
	if !r[6].Duplicate || r[6].ID != r[1].ID {
		t.Errorf("job 6: %+v, want job 1's answer (id %s) as a duplicate", r[6], r[1].ID)
	}
}

func TestHTTPBatch(t *testing.T) {
	t.Parallel()
	for _, ndjson := range []bool{false, true} {
		ct := spillway.BatchJSON
		if ndjson {
			ct = spillway.BatchNDJSON
		}
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			b := setup(t, batchConfig, setupOptions{})
			r := b.do(t, http.MethodPost, "/v1/queues/q/jobs:batch", bytes.NewReader(batchBody(ndjson, batchJobs...)), "Content-Type", ct)
			if r.code != http.StatusOK {
				t.Fatalf("%d %s, want 200", r.code, r.body)
			}
			var rep spillway.BatchReply
			if err := json.Unmarshal(r.body, &rep); err != nil {
				t.Fatalf("%s: %v", r.body, err)
			}
			checkBatchReply(t, rep)
			// The binary payload is stored as sent, the class as said.
			if j, ok := b.jobOfKey(t, "q", queue.Ready, "b"); !ok || !bytes.Equal(j.Payload, []byte{0, 0xff, 0x80}) {
				t.Errorf("client b's job %+v (found %v): want the payload 00 ff 80", j, ok)
			}
			if got := b.msgs(t, "q", queue.Backlog); got != 2 {
				t.Errorf("%d jobs in the backlog, want 2", got)
			}
		})
	}
}

// TestHTTPBatchUnreadable: a batch that cannot be read is refused as a
// whole, naming the job and the field at fault; nothing is decided.
func TestHTTPBatchUnreadable(t *testing.T) {
	t.Parallel()
	b := setup(t, batchConfig, setupOptions{})
	good := `{"headers": {"X-Client": "a"}, "payload": "x"}`
	many := make([]string, 1001)
	for i := range many {
		many[i] = good
	}
	for _, c := range []struct {
		name        string
		contentType string
		body        []byte
		code        int
		typ, field  string
	}{
		{"bad base64", spillway.BatchJSON, batchBody(false, good, `{"payload_base64": "%%%"}`), 400, spillway.ProblemBadRequest, "jobs[1].payload_base64"},
		{"both payloads", spillway.BatchNDJSON, batchBody(true, good, good, `{"payload": "a", "payload_base64": "YQ=="}`), 400, spillway.ProblemBadRequest, "jobs[2].payload_base64"},
		{"unknown field", spillway.BatchJSON, batchBody(false, `{"header": {}}`), 400, spillway.ProblemBadRequest, "jobs[0].header"},
		{"header not a string", spillway.BatchJSON, batchBody(false, good, `{"headers": {"Spillway-Cost": 2}}`), 400, spillway.ProblemBadRequest, "jobs[1].headers"},
		{"not an array", spillway.BatchJSON, []byte(good), 400, spillway.ProblemBadRequest, "body"},
		{"no jobs", spillway.BatchJSON, []byte("[]"), 400, spillway.ProblemBadRequest, "body"},
		{"content type", "text/plain", batchBody(false, good), 400, spillway.ProblemBadRequest, "Content-Type"},
		{"too many jobs", spillway.BatchJSON, batchBody(false, many...), 413, spillway.ProblemTooLarge, "body"},
		{"payload too large", spillway.BatchJSON, batchBody(false, `{"payload": "`+strings.Repeat("x", 1<<20+1)+`"}`), 413, spillway.ProblemTooLarge, "jobs[0].payload"},
	} {
		r := b.do(t, http.MethodPost, "/v1/queues/q/jobs:batch", bytes.NewReader(c.body), "Content-Type", c.contentType)
		if r.code != c.code || r.problem.Type != c.typ || r.problem.Field != c.field {
			t.Errorf("%s: %d %s, want %d %s naming %s", c.name, r.code, r.body, c.code, c.typ, c.field)
		}
	}
	if got := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); got != 0 {
		t.Errorf("%d jobs stored, want none", got)
	}
	if r := b.do(t, http.MethodPost, "/v1/queues/nope/jobs:batch", bytes.NewReader(batchBody(false, good)), "Content-Type", spillway.BatchJSON); r.code != 404 {
		t.Errorf("unknown queue: %d %s, want 404", r.code, r.body)
	}
}

func TestNATSBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, batchConfig, setupOptions{})
	for _, ndjson := range []bool{false, true} {
		m, err := apitest.Request(t, b.nc, &nats.Msg{Subject: spillway.SubmitBatchPrefix + "q", Data: batchBody(ndjson, batchJobs...)}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep spillway.BatchReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("%s: %v", m.Data, err)
		}
		if !ndjson {
			checkBatchReply(t, rep)
			continue
		}
		// The same jobs again: a's limit is full, b's has room, k-2
		// answers as before.
		want := []spillway.Status{spillway.Rejected, spillway.Queued, spillway.Rejected, spillway.Rejected, spillway.Failed, spillway.Queued, spillway.Queued}
		for i, w := range want {
			if rep.Results[i].Status != w {
				t.Errorf("again, job %d: %+v, want %s", i, rep.Results[i], w)
			}
		}
	}
	m, err := apitest.Request(t, b.nc, &nats.Msg{Subject: spillway.SubmitBatchPrefix + "q", Data: []byte(`[{"payload_base64": "%"}]`)}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep spillway.BatchReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Status != spillway.Failed || rep.Field != "jobs[0].payload_base64" ||
		m.Header.Get(spillway.HeaderStatus) != string(spillway.Failed) {
		t.Errorf("unreadable batch: %s %v, want status error naming jobs[0].payload_base64", m.Data, m.Header)
	}
}

// TestHTTPBatchShadowAndSchedule: a batch's results carry the values the
// Spillway-Shadow header of each job's single submission would; its jobs
// read Spillway-Delay and Spillway-Max-Wait as single submissions do, a
// malformed one failing its job only.
func TestHTTPBatchShadowAndSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, shadowConfig, setupOptions{})
	body := batchBody(false,
		`{"headers": {"X-Client": "c", "X-Tenant": "t"}, "payload": "one"}`,
		`{"headers": {"X-Client": "c", "X-Tenant": "t", "Spillway-Delay": "10m"}, "payload": "two"}`,
		`{"headers": {"X-Client": "c", "X-Tenant": "t", "Spillway-Delay": "soon"}, "payload": "three"}`,
		`{"headers": {"X-Client": "c", "X-Tenant": "t", "Spillway-Delay": "1h", "Spillway-Max-Wait": "30m"}, "payload": "four"}`,
	)
	r := b.do(t, http.MethodPost, "/v1/queues/q/jobs:batch", bytes.NewReader(body), "Content-Type", spillway.BatchJSON)
	if r.code != http.StatusOK {
		t.Fatalf("%d %s, want 200", r.code, r.body)
	}
	var rep spillway.BatchReply
	if err := json.Unmarshal(r.body, &rep); err != nil || len(rep.Results) != 4 {
		t.Fatalf("%s: %v, want 4 results", r.body, err)
	}
	res := rep.Results
	if res[0].Status != spillway.Admitted || len(res[0].Shadow) != 0 {
		t.Errorf("job 0: %+v, want admitted with no shadow values", res[0])
	}
	if want := []string{"strict would-queue", "hourly would-queue"}; res[1].Status != spillway.Queued || !slices.Equal(res[1].Shadow, want) ||
		res[1].NotBefore == nil {
		t.Errorf("job 1: %+v, want queued until its delay, shadow %q", res[1], want)
	}
	if res[2].Status != spillway.Failed || res[2].Type != spillway.ProblemBadRequest || !strings.Contains(res[2].Error, spillway.HeaderDelay) {
		t.Errorf("job 2: %+v, want bad-request naming %s", res[2], spillway.HeaderDelay)
	}
	if res[3].Status != spillway.Failed || res[3].Type != spillway.ProblemBadRequest || !strings.Contains(res[3].Error, spillway.HeaderMaxWait) {
		t.Errorf("job 3: %+v, want bad-request naming %s", res[3], spillway.HeaderMaxWait)
	}
}
