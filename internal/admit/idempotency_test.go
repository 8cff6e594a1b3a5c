package admit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const idemConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 100, delay: 50}
    backlog: {capacity: 1, leak_rate: 1/s}
`

// TestIdempotencyConcurrent: 20 submissions at once with one key store
// one job, and all get its id; 19 are told they are duplicates.
func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	a, b := setup(t, idemConfig, setupOptions{})
	const n = 20
	answers := make([]admit.Answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			answers[i], errs[i] = a.Submit(context.Background(), withIdem(request("q", "c"), "order-42"))
		})
	}
	close(gate)
	wg.Wait()
	dups := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submission %d: %v", i, errs[i])
		}
		r := answers[i].Reply
		if r.Status != spillway.Admitted || r.ID == "" || r.ID != answers[0].Reply.ID {
			t.Fatalf("submission %d: %+v; want admitted with the id all others got, %s", i, r, answers[0].Reply.ID)
		}
		if r.Duplicate {
			dups++
		}
	}
	if dups != n-1 {
		t.Errorf("%d of %d answers are duplicates, want %d", dups, n, n-1)
	}
	if got := b.msgs(t, "q", queue.Ready); got != 1 {
		t.Errorf("READY holds %d jobs, want 1", got)
	}
	// One unit taken: the next job of the key is the bucket's second
	// (burst 100: 100 units remain after the first job, 99 after two).
	if ans := submit(t, a, request("q", "c")); ans.Decision.Remaining != 99 {
		t.Errorf("after 20 idempotent submissions and one more, %d units remain; want 99 (two jobs taken)", ans.Decision.Remaining)
	}
	wantSamples(t, b.reg, "spillway_decisions_total", map[string]float64{
		"queue=q,reason=limit,verdict=admitted":        2,
		"queue=q,reason=idempotency,verdict=duplicate": n - 1,
	})
}

// TestIdempotencyRejectedIsReleased: only stored jobs are remembered; a
// submission the backlog refused leaves the key free, so a retry is
// decided afresh.
func TestIdempotencyRejectedIsReleased(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 100}
    backlog: {capacity: 1, leak_rate: 1/s}
`, setupOptions{})
	// The key's first job is admitted, its second fills the backlog.
	for _, want := range []spillway.Status{spillway.Admitted, spillway.Queued} {
		if ans := submit(t, a, request("q", "c")); ans.Reply.Status != want {
			t.Fatalf("%+v, want %s", ans.Reply, want)
		}
	}
	for range 2 {
		ans := submit(t, a, withIdem(request("q", "c"), "retry-me"))
		if ans.Reply.Status != spillway.Rejected || ans.Reply.Type != spillway.ProblemQueueFull || ans.Reply.Duplicate {
			t.Fatalf("with the backlog full: %+v, want rejected, queue-full, not a duplicate", ans.Reply)
		}
	}
	// Room again: the retry is decided, not answered from the rejection.
	s, err := b.JS.Stream(context.Background(), queue.StreamName("q", queue.Backlog))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := submit(t, a, withIdem(request("q", "c"), "retry-me"))
	if first.Reply.Status != spillway.Queued || first.Reply.Duplicate || first.Reply.ID == "" {
		t.Fatalf("retry with room in the backlog: %+v, want queued, not a duplicate", first.Reply)
	}
	again := submit(t, a, withIdem(request("q", "c"), "retry-me"))
	if again.Reply.Status != spillway.Queued || !again.Reply.Duplicate || again.Reply.ID != first.Reply.ID {
		t.Fatalf("retry of a stored job: %+v, want the first answer (%s) as a duplicate", again.Reply, first.Reply.ID)
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 1 {
		t.Errorf("the backlog holds %d jobs, want 1", n)
	}
}

// TestIdempotencyKeysAreScoped: one key in two queues is two keys, and a
// different key is a different job.
func TestIdempotencyKeysAreScoped(t *testing.T) {
	t.Parallel()
	a, _ := setup(t, `
queues:
  - name: q
    limits: [{key: global, algorithm: token_bucket, rate: 1/s, burst: 100}]
    backlog: {capacity: 10, leak_rate: 1/s}
  - name: r
    limits: [{key: global, algorithm: token_bucket, rate: 1/s, burst: 100}]
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	q := submit(t, a, withIdem(request("q", "c"), "k1"))
	r := submit(t, a, withIdem(request("r", "c"), "k1"))
	other := submit(t, a, withIdem(request("q", "c"), "k2"))
	if q.Reply.Duplicate || r.Reply.Duplicate || other.Reply.Duplicate || q.Reply.ID == r.Reply.ID || q.Reply.ID == other.Reply.ID {
		t.Errorf("k1 in q %+v, k1 in r %+v, k2 in q %+v; want three new jobs", q.Reply, r.Reply, other.Reply)
	}
}

// TestIdempotencyStaleClaim: a claim whose admitter stopped before
// answering (here: held in its decision) is taken over by another
// admitter after StaleAfter, with the same job id, so that the job, if
// the first admitter stores it after all, is stored once.
func TestIdempotencyStaleClaim(t *testing.T) {
	t.Parallel()
	gate := admittest.NewGateStore(t)
	stuck, b := setup(t, idemConfig, setupOptions{primary: gate})
	other, _ := setup(t, idemConfig, setupOptions{nats: b.nats, staleAfter: 50 * time.Millisecond})

	type result struct {
		ans admit.Answer
		err error
	}
	first := make(chan result, 1)
	go func() {
		ans, err := stuck.Submit(context.Background(), withIdem(request("q", "c"), "k"))
		first <- result{ans, err}
	}()
	gate.WaitArrived(t, 1, 10*time.Second) // the key is claimed, the decision held

	taken := submit(t, other, withIdem(request("q", "c"), "k"))
	if taken.Reply.Status != spillway.Admitted || taken.Reply.Duplicate || taken.Reply.ID == "" {
		t.Fatalf("the other admitter, after StaleAfter: %+v; want admitted, not a duplicate", taken.Reply)
	}
	gate.Release()
	r := <-first
	if r.err != nil {
		t.Fatalf("the stuck admitter, released: %v", r.err)
	}
	if r.ans.Reply.ID != taken.Reply.ID {
		t.Errorf("the stuck admitter stored job %s, the one that took over job %s; want one id", r.ans.Reply.ID, taken.Reply.ID)
	}
	if n := b.msgs(t, "q", queue.Ready); n != 1 {
		t.Errorf("READY holds %d jobs, want 1 (JetStream deduplicates the job id)", n)
	}
	// The answer the record keeps is the one that took over.
	again := submit(t, other, withIdem(request("q", "c"), "k"))
	if !again.Reply.Duplicate || again.Reply.ID != taken.Reply.ID {
		t.Errorf("a later retry: %+v, want a duplicate of %s", again.Reply, taken.Reply.ID)
	}
}

// TestIdempotencyWaitsForTheFirst: a retry that arrives while the first
// submission is being decided waits for its answer, and gives up with
// the caller's context.
func TestIdempotencyWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	gate := admittest.NewGateStore(t)
	a, b := setup(t, idemConfig, setupOptions{primary: gate})
	first := make(chan admit.Answer, 1)
	go func() {
		ans, err := a.Submit(context.Background(), withIdem(request("q", "c"), "k"))
		if err != nil {
			t.Errorf("first: %v", err)
		}
		first <- ans
	}()
	gate.WaitArrived(t, 1, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := a.Submit(ctx, withIdem(request("q", "c"), "k"))
	var e *admit.Error
	if !errors.As(err, &e) || e.Type != spillway.ProblemUnavailable || e.RetryAfter <= 0 {
		t.Fatalf("a retry whose context ends while the first is decided: %v, want unavailable with a Retry-After", err)
	}

	second := make(chan admit.Answer, 1)
	go func() {
		ans, err := a.Submit(context.Background(), withIdem(request("q", "c"), "k"))
		if err != nil {
			t.Errorf("second: %v", err)
		}
		second <- ans
	}()
	gate.Release()
	f, s := <-first, <-second
	if f.Reply.Duplicate || !s.Reply.Duplicate || f.Reply.ID != s.Reply.ID || s.Reply.Status != f.Reply.Status {
		t.Errorf("first %+v, second %+v; want the second to be a duplicate of the first", f.Reply, s.Reply)
	}
	if n := gate.Entered(); n != 1 {
		t.Errorf("%d decisions, want 1", n)
	}
	if n := b.msgs(t, "q", queue.Ready); n != 1 {
		t.Errorf("READY holds %d jobs, want 1", n)
	}
}

// TestIdempotencyAcrossAdmitters: the record is in the shared KV
// bucket, so a second admitter on the same JetStream answers a retry from
// it.
func TestIdempotencyAcrossAdmitters(t *testing.T) {
	t.Parallel()
	a1, b := setup(t, idemConfig, setupOptions{})
	a2, _ := setup(t, idemConfig, setupOptions{nats: b.nats})
	first := submit(t, a1, withIdem(request("q", "c"), "k"))
	again := submit(t, a2, withIdem(request("q", "c"), "k"))
	if !again.Reply.Duplicate || again.Reply.ID != first.Reply.ID {
		t.Errorf("the other admitter: %+v, want a duplicate of %+v", again.Reply, first.Reply)
	}
	kv, err := b.JS.KeyValue(context.Background(), admit.IdempotencyBucketOf("", "q", "k"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() != 1 {
		t.Errorf("the %s bucket holds %d values, want 1", st.Bucket(), st.Values())
	}
}

// TestIdempotencyUnknownOutcome: a submission whose job was sent to
// JetStream but not acknowledged before its caller gave up may have been
// stored. A retry with the same idempotency key must not store it a
// second time: it reuses the job id, which JetStream deduplicates.
func TestIdempotencyUnknownOutcome(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	px := startProxy(t, strings.TrimPrefix(srv.URL(), "nats://"))
	gate := admittest.NewGateStore(t)
	a, b := setup(t, idemConfig, setupOptions{nats: srv, natsURL: px.URL(), primary: gate})
	direct := srv.JetStream(t)

	kv, err := direct.KeyValue(context.Background(), admit.IdempotencyBucketOf("", "q", "k"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })

	type result struct {
		ans admit.Answer
		err error
	}
	first := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ans, err := a.Submit(ctx, withIdem(request("q", "c"), "k"))
		first <- result{ans, err}
	}()
	gate.WaitArrived(t, 1, 10*time.Second) // the key is claimed; the decision is held
	px.hold()                              // from here the admitter hears nothing back
	gate.Release()                         // the job is published, stored, its PubAck held

	// The admitter gives up on the PubAck and settles its claim; once the
	// record changed (or went), let the answers through.
	settled := false
	deadline := time.After(10 * time.Second)
	for !settled {
		select {
		case e := <-w.Updates():
			if e == nil { // the end of the initial values
				continue
			}
			settled = e.Revision() > 1 || e.Operation() != jetstream.KeyValuePut
		case <-deadline:
			t.Fatal("the claim was not settled within 10s")
		}
	}
	px.release()
	r := <-first
	var e *admit.Error
	if !errors.As(r.err, &e) || e.Type != spillway.ProblemUnavailable {
		t.Fatalf("the submission whose PubAck never came: %+v, %v; want unavailable", r.ans.Reply, r.err)
	}
	if n := b.msgs(t, "q", queue.Ready); n != 1 {
		t.Fatalf("READY holds %d jobs, want 1: the job was stored though not acknowledged", n)
	}
	s, err := direct.Stream(context.Background(), queue.StreamName("q", queue.Ready))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	stored := m.Header.Get(spillway.HeaderJobID)

	retry := submit(t, a, withIdem(request("q", "c"), "k"))
	if retry.Reply.Status != spillway.Admitted || retry.Reply.ID != stored {
		t.Errorf("the retry: %+v; want admitted as the job already stored, %s", retry.Reply, stored)
	}
	if n := b.msgs(t, "q", queue.Ready); n != 1 {
		t.Errorf("after the retry READY holds %d jobs, want 1: the retry stored the job a second time", n)
	}
}

// An idempotency key is its caller's: another caller's submission with
// the same key is a job of its own, never the first caller's answer; the
// same caller's with another job (payload, cost, a key header) is refused
// as idempotency-mismatch, taking nothing; the same job again is the
// first answer. Batches alike.
func TestIdempotencyPerCaller(t *testing.T) {
	t.Parallel()
	a, b := setup(t, idemConfig, setupOptions{})
	as := func(caller string, r *admit.Request) *admit.Request { r.Caller = caller; return r }
	first := submit(t, a, as("sha256:aaaaaaaaaaaa", withIdem(request("q", "c"), "k")))
	other := submit(t, a, as("sha256:bbbbbbbbbbbb", withIdem(request("q", "c"), "k")))
	if other.Reply.Duplicate || other.Reply.ID == first.Reply.ID || other.Reply.ID == "" {
		t.Errorf("another caller with the same key: %+v; want a job of its own, not %s", other.Reply, first.Reply.ID)
	}
	if again := submit(t, a, as("sha256:aaaaaaaaaaaa", withIdem(request("q", "c"), "k"))); !again.Reply.Duplicate || again.Reply.ID != first.Reply.ID {
		t.Errorf("the same job again: %+v, want a duplicate of %s", again.Reply, first.Reply.ID)
	}
	for name, r := range map[string]*admit.Request{
		"payload": func() *admit.Request { r := request("q", "c"); r.Payload = []byte("another job"); return r }(),
		"cost":    func() *admit.Request { r := request("q", "c"); r.Cost = 2; return r }(),
		"key":     request("q", "d"),
	} {
		_, err := a.Submit(t.Context(), as("sha256:aaaaaaaaaaaa", withIdem(r, "k")))
		var e *admit.Error
		if !errors.As(err, &e) || e.Type != spillway.ProblemIdempotencyMismatch || e.Field != spillway.HeaderIdempotencyKey {
			t.Errorf("the key with another %s: %v, want idempotency-mismatch", name, err)
		}
	}
	rs, err := a.SubmitBatch(t.Context(), "q", []*admit.Request{
		as("sha256:aaaaaaaaaaaa", withIdem(request("q", "c"), "k")),
		as("sha256:aaaaaaaaaaaa", withIdem(request("q", "d"), "k")),
		as("sha256:cccccccccccc", withIdem(request("q", "c"), "k")),
	})
	if err != nil {
		t.Fatal(err)
	}
	var e *admit.Error
	switch {
	case rs[0].Err != nil || !rs[0].Answer.Reply.Duplicate || rs[0].Answer.Reply.ID != first.Reply.ID:
		t.Errorf("batch job 0, the same job: %+v %v; want a duplicate of %s", rs[0].Answer.Reply, rs[0].Err, first.Reply.ID)
	case !errors.As(rs[1].Err, &e) || e.Type != spillway.ProblemIdempotencyMismatch:
		t.Errorf("batch job 1, another job: %+v %v; want idempotency-mismatch", rs[1].Answer.Reply, rs[1].Err)
	case rs[2].Err != nil || rs[2].Answer.Reply.Duplicate || rs[2].Answer.Reply.ID == first.Reply.ID || rs[2].Answer.Reply.ID == other.Reply.ID:
		t.Errorf("batch job 2, a third caller: %+v %v; want a job of its own", rs[2].Answer.Reply, rs[2].Err)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 3 {
		t.Errorf("%d jobs stored, want 3 (one per caller)", n)
	}
}
