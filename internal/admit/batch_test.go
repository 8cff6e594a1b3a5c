package admit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/api"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// batchTwinConfig: two queues alike, so that one takes a batch and the
// other the same jobs as single submissions from the same (empty) state.
// Per client a leaky bucket, and a global token bucket that runs dry, so
// that keys share a tier; READY and the backlog are small, per key too, so
// that jobs are moved from a full READY to the backlog, refused by a full
// backlog or by their key's full share, and given their units back.
const batchTwinConfig = `
queues:
  - name: batch
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 12, delay: 2}
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 250}
    backlog: {capacity: 100, per_key_capacity: 2, leak_rate: 1/s}
    ready: {capacity: 20}
  - name: singles
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 12, delay: 2}
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 250}
    backlog: {capacity: 100, per_key_capacity: 2, leak_rate: 1/s}
    ready: {capacity: 20}
`

// twinJobs are n submissions with seeded random clients, costs, classes
// and idempotency keys (some repeated, some bad), for queue q.
func twinJobs(q string, n int) []*admit.Request {
	rng := rand.New(rand.NewPCG(7, 11))
	out := make([]*admit.Request, n)
	for i := range out {
		h := map[string]string{"X-Client": fmt.Sprintf("client-%d", rng.IntN(24))}
		if i%97 == 13 {
			delete(h, "X-Client") // bad-key, answered before any tier
		}
		r := &admit.Request{Queue: q, Payload: []byte("job " + strconv.Itoa(i)), Cost: int64(1 + rng.IntN(3)),
			Priority: queue.Priorities[rng.IntN(3)], Header: func(k string) string { return h[k] }}
		if rng.IntN(5) == 0 {
			r.IdempotencyKey = "idem-" + strconv.Itoa(rng.IntN(60)) // repeats within the batch
		}
		if i%211 == 5 {
			r.Cost = 50 // over the leaky tier's quota: bad-cost
		}
		out[i] = r
	}
	return out
}

// TestBatchEqualsSingles is the contract of batch submission: 1,000 jobs
// in one batch get, job by job, the answers the same jobs get as single
// submissions one after the other from the same state — verdicts, problem
// types, not-befores, backlog positions (the order the jobs were stored
// in), duplicates — with a real Redis (its clock held still, so that both
// runs decide at the same instant) and a real JetStream.
func TestBatchEqualsSingles(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	store, err := redisbucket.New(client, redisbucket.WithClock(func() time.Time { return at }), redisbucket.WithPrefix(redistest.KeyPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	a, b := setup(t, batchTwinConfig, setupOptions{primary: store})
	ctx := context.Background()

	const n = admit.MaxBatch
	results, err := a.SubmitBatch(ctx, "batch", twinJobs("batch", n))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != n {
		t.Fatalf("%d results for %d jobs", len(results), n)
	}
	singles := make([]admit.BatchResult, n)
	for i, r := range twinJobs("singles", n) {
		ans, err := a.Submit(ctx, r)
		singles[i] = admit.BatchResult{Answer: ans, Err: err}
	}

	counts := map[string]int{}
	firstOf := [2]map[string]int{{}, {}} // job id → index of its first answer
	for i := range n {
		got, want := outcome(results[i], firstOf[0], i), outcome(singles[i], firstOf[1], i)
		counts[want]++
		if got != want {
			t.Errorf("job %d: batch %s\n          singles %s", i, got, want)
		}
	}
	t.Logf("outcomes: %d kinds; %v", len(counts), summary(singles))
	for _, d := range []queue.Destination{queue.Ready, queue.Backlog} {
		if gb, gs := b.msgs(t, "batch", d), b.msgs(t, "singles", d); gb != gs {
			t.Errorf("%s: %d jobs after the batch, %d after the singles", d, gb, gs)
		}
	}
	// The runs must have met every case the batch has to get right.
	s := summary(singles)
	for _, k := range []string{"admitted", "queued", "rate-limited", "queue-full", "key-full", "duplicate", "bad-key", "bad-cost", "ready-full"} {
		if s[k] == 0 {
			t.Errorf("no job was %s: the scenario does not test it (%v)", k, s)
		}
	}
}

// outcome is what a result says that both runs must agree on; ids are
// named by the index of the job that first got them.
func outcome(r admit.BatchResult, firstOf map[string]int, i int) string {
	if r.Err != nil {
		var e *admit.Error
		if ok := asError(r.Err, &e); ok {
			return "error " + e.Type + " " + e.Field
		}
		return "error " + r.Err.Error()
	}
	rep := r.Answer.Reply
	id := ""
	if rep.ID != "" {
		if _, ok := firstOf[rep.ID]; !ok {
			firstOf[rep.ID] = i
		}
		id = "job" + strconv.Itoa(firstOf[rep.ID])
	}
	nb := ""
	if rep.NotBefore != nil {
		nb = rep.NotBefore.Format(time.RFC3339Nano)
	}
	ra := int64(0)
	if rep.Type == api.ProblemRateLimited {
		ra = rep.RetryAfterMS // the tiers' own: the backlog's depends on when it is read
	}
	return fmt.Sprintf("%s type=%s id=%s not_before=%s position=%d duplicate=%t ready_full=%t retry_after_ms=%d",
		rep.Status, rep.Type, id, nb, rep.Position, rep.Duplicate, r.Answer.ReadyFull, ra)
}

func asError(err error, e **admit.Error) bool {
	return errors.As(err, e)
}

// summary counts the kinds of answers.
func summary(rs []admit.BatchResult) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		var e *admit.Error
		switch {
		case asError(r.Err, &e):
			m[e.Type[len("https://spillway.dev/problems/"):]]++
		case r.Err != nil:
			m["error"]++
		case r.Answer.Reply.Duplicate:
			m["duplicate"]++
		case r.Answer.Reply.Type != "":
			m[r.Answer.Reply.Type[len("https://spillway.dev/problems/"):]]++
		default:
			m[string(r.Answer.Reply.Status)]++
		}
		if r.Answer.ReadyFull {
			m["ready-full"]++
		}
	}
	return m
}
