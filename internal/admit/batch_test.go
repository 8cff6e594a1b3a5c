package admit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// twinJobs are n submissions with seeded random clients, costs, classes
// and idempotency keys (some repeated, some bad), for queue q; some are
// scheduled (a delay, or a time from at), some have a max-wait, which
// some exceed whatever their tiers say and some in the backlog. Half the
// repeats of an idempotency key repeat its first job (a duplicate), the
// others carry another job (a mismatch).
func twinJobs(q string, n int, at time.Time) []*admit.Request {
	rng := rand.New(rand.NewPCG(7, 11))
	out := make([]*admit.Request, n)
	firstWith := map[string]*admit.Request{}
	for i := range out {
		h := map[string]string{"X-Client": fmt.Sprintf("client-%d", rng.IntN(24))}
		if i%97 == 13 {
			delete(h, "X-Client") // bad-key, answered before any tier
		}
		r := &admit.Request{Queue: q, Payload: []byte("job " + strconv.Itoa(i)), Cost: int64(1 + rng.IntN(3)),
			Priority: spillway.Priorities[rng.IntN(3)], Keys: func(k string) string { return h[k] }}
		if rng.IntN(5) == 0 {
			r.IdempotencyKey = "idem-" + strconv.Itoa(rng.IntN(60)) // repeats within the batch
		}
		if i%211 == 5 {
			r.Cost = 50 // over the leaky tier's quota: bad-cost
		}
		if i%13 == 4 {
			r.Schedule.Delay = time.Duration(1+i%7) * time.Minute // scheduled
		}
		if i%17 == 9 {
			w := []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}[i%3]
			r.Schedule.MaxWait = &w // wait-too-long when the backlog is deep
		}
		if i%89 == 3 {
			w := 10 * time.Minute
			r.Schedule = admit.Schedule{NotBefore: at.Add(time.Hour), MaxWait: &w} // too late before any tier
		}
		if k := r.IdempotencyKey; k != "" {
			if first, ok := firstWith[k]; !ok {
				firstWith[k] = r
			} else if rng.IntN(2) == 0 {
				repeat := *first
				r = &repeat
			}
		}
		out[i] = r
	}
	return out
}

// TestBatchEqualsSingles is the contract of batch submission: 1,000 jobs
// in one batch get, job by job, the answers the same jobs get as single
// submissions one after the other from the same state — verdicts, problem
// types, not-befores, backlog positions (the order the jobs were stored
// in), duplicates, schedules and max-waits — with a real Redis and an
// admitter whose clocks are held still, so that both runs decide at the
// same instant, and a real JetStream.
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
	var hooks storedHooks
	a, b := setup(t, admittest.TwinConfig, setupOptions{primary: store, now: func() time.Time { return at }, options: hooks.install})
	ctx := context.Background()

	const n = admit.MaxBatch
	reqs := twinJobs("batch", n, at)
	results, err := a.SubmitBatch(ctx, "batch", reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != n {
		t.Fatalf("%d results for %d jobs", len(results), n)
	}
	hooks.checkBatch(t, reqs, results)
	singles := make([]admit.BatchResult, n)
	for i, r := range twinJobs("singles", n, at) {
		ans, err := a.Submit(ctx, r)
		singles[i] = admit.BatchResult{Answer: ans, Err: err}
	}
	if got, want := len(hooks.single), len(storedOf(singles)); got != want {
		t.Errorf("singles: OnStored called %d times, want %d (the jobs stored)", got, want)
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
	for _, k := range []string{"admitted", "queued", "rate-limited", "queue-full", "key-full", "duplicate", "idempotency-mismatch", "bad-key", "bad-cost", "ready-full", "scheduled", "wait-too-long", "wait-too-long-refunded"} {
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
	if rep.Type == spillway.ProblemRateLimited || rep.Type == spillway.ProblemWaitTooLong {
		ra = rep.RetryAfterMS // the tiers' own, or the max-wait's: the backlog's depends on when it is read
	}
	return fmt.Sprintf("%s type=%s id=%s not_before=%s position=%d duplicate=%t ready_full=%t retry_after_ms=%d scheduled=%t refunded=%d",
		rep.Status, rep.Type, id, nb, rep.Position, rep.Duplicate, r.Answer.ReadyFull, ra, r.Answer.Scheduled, r.Answer.Refunded)
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
		if r.Answer.Scheduled {
			m["scheduled"]++
		}
		if r.Answer.Reply.Type == spillway.ProblemWaitTooLong && r.Answer.Refunded > 0 {
			m["wait-too-long-refunded"]++
		}
	}
	return m
}

// TestBatchShadowTiers: a batch's jobs get from the queue's shadow tiers,
// job by job, what single submissions of the same jobs get (their
// Spillway-Shadow values), and the rate-limit headers of its enforcing
// tiers only.
func TestBatchShadowTiers(t *testing.T) {
	t.Parallel()
	run := func(batch bool) []admit.Answer {
		a, _ := setup(t, shadowQueue("shadow"), setupOptions{})
		var reqs []*admit.Request
		for _, cost := range shadowBurst {
			r := request("q", "c")
			r.Cost = cost
			reqs = append(reqs, r)
		}
		var out []admit.Answer
		if batch {
			results, err := a.SubmitBatch(context.Background(), "q", reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, res := range results {
				if res.Err != nil {
					t.Fatalf("job %d: %v", i, res.Err)
				}
				out = append(out, res.Answer)
			}
			return out
		}
		for _, r := range reqs {
			out = append(out, submit(t, a, r))
		}
		return out
	}
	singles, batch := run(false), run(true)
	wouldNot := 0
	for i := range singles {
		s, b := singles[i], batch[i]
		got := fmt.Sprint(b.Reply.Status, " shadow ", b.Shadow, " policies ", b.RateLimit.Policies)
		if want := fmt.Sprint(s.Reply.Status, " shadow ", s.Shadow, " policies ", s.RateLimit.Policies); got != want {
			t.Errorf("job %d: batch %s\n          singles %s", i, got, want)
		}
		if len(s.Shadow) != 1 {
			t.Errorf("job %d: %d shadow decisions, want 1", i, len(s.Shadow))
		}
		wouldNot += len(s.ShadowHeader())
	}
	if wouldNot == 0 {
		t.Error("every shadow decision admitted: the burst does not test the batch's shadow decisions")
	}
}

// storedHooks records what an admitter reports of the jobs it stores.
type storedHooks struct {
	mu     sync.Mutex
	single []admit.StoredJob   // OnStored's
	batch  [][]admit.StoredJob // OnBatchStored's, a call each
}

func (h *storedHooks) install(o *admit.Options) {
	o.OnStored = func(j *queue.Job, st spillway.Status, at queue.Stored) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.single = append(h.single, admit.StoredJob{Job: j, Status: st, At: at})
	}
	o.OnBatchStored = func(jobs []admit.StoredJob) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.batch = append(h.batch, jobs)
	}
}

// storedOf is the id and status of each job rs stored, in order.
func storedOf(rs []admit.BatchResult) []string {
	var out []string
	for _, r := range rs {
		if st := r.Answer.Reply.Status; r.Err == nil && !r.Answer.Reply.Duplicate && (st == spillway.Admitted || st == spillway.Queued) {
			out = append(out, r.Answer.Reply.ID+" "+string(st))
		}
	}
	return out
}

// checkBatch checks what a batch reported: one OnBatchStored call with the
// jobs it stored, in order, and no OnStored; and the ids of its jobs made
// together (queue.NewJobIDs: a group of 64 shares its first 10 bytes, and
// byte 10's top 6 bits are the job's place in the group), those with an
// idempotency key too.
func (h *storedHooks) checkBatch(t *testing.T, reqs []*admit.Request, rs []admit.BatchResult) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.single) != 0 || len(h.batch) != 1 {
		t.Fatalf("a batch made %d OnStored and %d OnBatchStored calls, want 0 and 1", len(h.single), len(h.batch))
	}
	var got []string
	for _, j := range h.batch[0] {
		got = append(got, j.Job.ID+" "+string(j.Status))
	}
	if want := storedOf(rs); !slices.Equal(got, want) {
		t.Errorf("OnBatchStored reported %d jobs, the answers say %d were stored:\n%v\nwant\n%v", len(got), len(want), got, want)
	}
	base := map[int]uuid.UUID{} // group → the first 10 bytes its ids share
	made, idem := 0, 0
	for i, r := range rs {
		if r.Answer.Reply.Duplicate || r.Answer.Reply.ID == "" {
			continue // the first's id, or none
		}
		u := uuid.MustParse(r.Answer.Reply.ID)
		if slot := int(u[10] >> 2); slot != i%queue.JobIDsPerGroup {
			t.Errorf("job %d: id %s holds place %d, want its place in its group", i, u, slot)
		}
		clear(u[10:])
		g := i / queue.JobIDsPerGroup
		if b, ok := base[g]; !ok {
			base[g] = u
		} else if u != b {
			t.Errorf("job %d: id %s is not of the batch's ids (%s)", i, r.Answer.Reply.ID, b)
		}
		made++
		if reqs[i].IdempotencyKey != "" {
			idem++
		}
	}
	if made == 0 || idem == 0 {
		t.Errorf("%d jobs stored, %d with an idempotency key: the ids are not checked", made, idem)
	}
}

// A batch's job that takes over an earlier submission's claim (its
// idempotency key's, gone stale) keeps that claim's id, made by an earlier
// batch, and is reported alone (OnStored): the batch's group of status
// records holds the ids it made only, and never writes an earlier batch's.
func TestBatchTakeoverIsReportedAlone(t *testing.T) {
	t.Parallel()
	var hooks storedHooks
	a, b := setup(t, idemConfig, setupOptions{staleAfter: 50 * time.Millisecond, options: hooks.install})
	ctx := t.Context()
	earlier, err := queue.NewJobIDs("q", 3) // an earlier batch's, whose answers were lost
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range earlier {
		sum := admit.RequestSum(a.Config().Queue("q"), request("q", "c"))
		if c, first, err := b.Idempotency.Claim(ctx, "", "q", fmt.Sprint("k", i), id, sum); err != nil || first != nil || c == nil {
			t.Fatalf("claiming k%d: %v %v", i, first, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // past StaleAfter: the claims may be taken over
	reqs := []*admit.Request{withIdem(request("q", "c"), "k0"), request("q", "c"), withIdem(request("q", "c"), "k1"),
		request("q", "c"), withIdem(request("q", "c"), "k2")}
	rs, err := a.SubmitBatch(ctx, "q", reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil || r.Answer.Reply.Status != spillway.Admitted || r.Answer.Reply.Duplicate {
			t.Fatalf("job %d: %+v %v; want admitted", i, r.Answer.Reply, r.Err)
		}
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	var alone, together []string
	for _, j := range hooks.single {
		alone = append(alone, j.Job.ID)
	}
	if len(hooks.batch) != 1 {
		t.Fatalf("%d OnBatchStored calls, want 1", len(hooks.batch))
	}
	for _, j := range hooks.batch[0] {
		together = append(together, j.Job.ID)
	}
	if want := []string{rs[0].Answer.Reply.ID, rs[2].Answer.Reply.ID, rs[4].Answer.Reply.ID}; !slices.Equal(alone, earlier) || !slices.Equal(want, earlier) {
		t.Errorf("the takeovers: answered %v, reported alone %v; want the earlier ids %v", want, alone, earlier)
	}
	if want := []string{rs[1].Answer.Reply.ID, rs[3].Answer.Reply.ID}; !slices.Equal(together, want) {
		t.Errorf("reported together %v, want the batch's own jobs %v", together, want)
	}
}
