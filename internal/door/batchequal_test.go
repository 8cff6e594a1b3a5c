package door_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// twinHeaders are n jobs' headers (name, value, …), seeded: 20 clients,
// costs 1 to 3, classes, idempotency keys that repeat — half of the
// repeats the same job again (twinPayload), half another job — and some
// jobs without their key, over their quota, scheduled (a delay, or a time
// from at), with a max-wait, or with a bad header.
func twinHeaders(n int, at time.Time) [][]string {
	rng := rand.New(rand.NewPCG(3, 5))
	out := make([][]string, n)
	firstWith := map[string][]string{} // idempotency key → its first job's headers
	for i := range out {
		h := []string{spillway.HeaderCost, fmt.Sprint(1 + rng.IntN(3)), spillway.HeaderPriority, []string{"high", "normal", "low"}[rng.IntN(3)]}
		if i%101 != 17 {
			h = append(h, "X-Client", fmt.Sprintf("client-%d", rng.IntN(20)))
		}
		if rng.IntN(6) == 0 {
			h = append(h, spillway.HeaderIdempotencyKey, fmt.Sprintf("idem-%d", rng.IntN(50)))
		}
		switch {
		case i%199 == 7:
			h[1] = "40" // over the leaky tier's quota
		case i%11 == 3:
			h = append(h, spillway.HeaderDelay, fmt.Sprintf("%dm", 1+i%5))
		case i%83 == 2:
			h = append(h, spillway.HeaderNotBefore, at.Add(90*time.Second).Format(time.RFC3339))
		case i%127 == 5:
			h = append(h, spillway.HeaderDelay, "soon") // malformed
		}
		if i%19 == 8 {
			h = append(h, spillway.HeaderMaxWait, []string{"4s", "40s", "3m"}[i%3])
		}
		if k := twinIdem(h); k != "" {
			if first, ok := firstWith[k]; !ok {
				firstWith[k] = h
			} else if rng.IntN(2) == 0 {
				h = first // the same job again
			}
		}
		out[i] = h
	}
	return out
}

// twinIdem is the idempotency key of job headers h, or "".
func twinIdem(h []string) string {
	for k := 0; k+1 < len(h); k += 2 {
		if h[k] == spillway.HeaderIdempotencyKey {
			return h[k+1]
		}
	}
	return ""
}

// twinPayload is job i's payload: its idempotency key's, so that a job
// with the headers of the key's first job is that job again.
func twinPayload(h []string, i int) string {
	if k := twinIdem(h); k != "" {
		return "job " + k
	}
	return fmt.Sprint("job ", i)
}

// twinOutcome is what a job's answer says, its id replaced by the index
// of the job that first got it (a duplicate's), which the two runs share.
func twinOutcome(r spillway.SubmitReply, firstOf map[string]int, i int) string {
	first := -1
	if r.ID != "" {
		if f, ok := firstOf[r.ID]; ok {
			first = f
		} else {
			firstOf[r.ID] = i
		}
	}
	at := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s not_before=%s position=%d estimated_start=%s retry_after_ms=%d duplicate=%v of=%d",
		twinKind(r), at(r.NotBefore), r.Position, at(r.EstimatedStart), r.RetryAfterMS, r.Duplicate, first)
}

// twinKind is an answer's status and problem type, without the types'
// common prefix.
func twinKind(r spillway.SubmitReply) string {
	prefix := spillway.ProblemRateLimited[:strings.LastIndex(spillway.ProblemRateLimited, "/")+1]
	return strings.TrimSpace(string(r.Status) + " " + strings.TrimPrefix(r.Type, prefix))
}

// TestBatchEqualsSinglesOverEachDoor: a batch of 1,000 jobs over each
// door (HTTP, NATS) gets, job by job, the answers the same 1,000 jobs get
// as single submissions over that door, one after the other, from the
// same state — with the store's and the admitter's clocks held still, so
// that both decide at the same instant, on a real JetStream.
func TestBatchEqualsSinglesOverEachDoor(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	jobs := twinHeaders(admit.MaxBatch, at)
	for _, door := range []string{"http", "nats"} {
		t.Run(door, func(t *testing.T) {
			t.Parallel()
			mem, err := bucket.NewMemory(bucket.WithClock(now))
			if err != nil {
				t.Fatal(err)
			}
			store, err := admit.NewFailover(mem, "")
			if err != nil {
				t.Fatal(err)
			}
			b := setup(t, admittest.TwinConfig, setupOptions{store: store, now: now})
			batch := b.submitBatch(t, door, jobs)
			firstOf := [2]map[string]int{{}, {}}
			kinds := map[string]int{}
			for i, h := range jobs {
				single := b.submitOne(t, door, h, i)
				got, want := twinOutcome(batch[i].SubmitReply, firstOf[0], i), twinOutcome(single, firstOf[1], i)
				kinds[twinKind(single)]++
				if single.Duplicate {
					kinds["duplicate"]++
				}
				if got != want {
					t.Errorf("job %d %v:\n  batch   %s\n  singles %s", i, h, got, want)
				}
			}
			t.Logf("%s: %d kinds of answer: %v", door, len(kinds), kinds)
			if kinds["error unavailable"]+kinds["error internal"] != 0 {
				t.Errorf("%s: answers of a failure, not of the state: %v", door, kinds)
			}
			for _, k := range []string{"admitted", "queued", "duplicate", "rejected rate-limited", "rejected queue-full", "rejected key-full", "rejected wait-too-long", "error bad-request", "error bad-key", "error bad-cost", "error idempotency-mismatch"} {
				if kinds[k] == 0 {
					t.Errorf("%s: no job was %q: the scenario does not test it", door, k)
				}
			}
		})
	}
}

// submitBatch sends jobs to queue batch as one batch over door.
func (b *testBundle) submitBatch(t *testing.T, door string, jobs [][]string) []spillway.BatchResult {
	t.Helper()
	objs := make([]string, len(jobs))
	for i, h := range jobs {
		hm := map[string]string{}
		for k := 0; k+1 < len(h); k += 2 {
			hm[h[k]] = h[k+1]
		}
		j, err := json.Marshal(map[string]any{"headers": hm, "payload": twinPayload(h, i)})
		if err != nil {
			t.Fatal(err)
		}
		objs[i] = string(j)
	}
	var rep spillway.BatchReply
	switch door {
	case "http":
		r := b.do(t, http.MethodPost, "/v1/queues/batch/jobs:batch", bytes.NewReader(batchBody(false, objs...)), "Content-Type", spillway.BatchJSON)
		if r.code != http.StatusOK {
			t.Fatalf("batch over HTTP: %d %s", r.code, r.body)
		}
		if err := json.Unmarshal(r.body, &rep); err != nil {
			t.Fatal(err)
		}
	default:
		m, err := apitest.Request(t, b.nc, &nats.Msg{Subject: spillway.SubmitBatchPrefix + "batch", Data: batchBody(false, objs...)}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
	}
	if len(rep.Results) != len(jobs) {
		t.Fatalf("%d results for %d jobs: %+v", len(rep.Results), len(jobs), rep)
	}
	return rep.Results
}

// submitOne sends job i (its headers h) to queue singles over door, and
// returns its answer as a batch result says it.
func (b *testBundle) submitOne(t *testing.T, door string, h []string, i int) spillway.SubmitReply {
	t.Helper()
	payload := []byte(twinPayload(h, i))
	if door == "nats" {
		return ask(t, b.nc, natsMsg("singles", payload, h...))
	}
	r := b.do(t, http.MethodPost, "/v1/queues/singles/jobs", bytes.NewReader(payload), h...)
	switch r.code {
	case http.StatusOK, http.StatusAccepted:
		return r.reply
	case http.StatusTooManyRequests:
		return spillway.SubmitReply{Queue: r.problem.Queue, Status: spillway.Rejected, Type: r.problem.Type, RetryAfterMS: r.problem.RetryAfterMS}
	default:
		return spillway.SubmitReply{Queue: "singles", Status: spillway.Failed, Type: r.problem.Type}
	}
}
