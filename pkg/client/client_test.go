package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// doors are a client of each of a's doors, by name.
func doors(t *testing.T, a *admitter, opts ...client.Option) map[string]*client.Client {
	t.Helper()
	// Every HTTP answer the client reads is checked against the contract.
	checked := client.WithHTTPClient(apitest.Client(t, &http.Client{}))
	h := must(client.NewHTTP(a.httpURL(), append([]client.Option{client.WithAPIKey(testKey), checked}, opts...)...))(t)
	n := must(client.NewNATS(a.connect(t), append([]client.Option{client.WithAPIKey(testKey)}, opts...)...))(t)
	return map[string]*client.Client{"http": h, "nats": n}
}

// Every verdict, on both doors, from a real admitter: admitted, queued
// with its place and start, rejected with its reason and wait, and a
// duplicate answered with the first job's id.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for door, c := range doors(t, a) {
		who := client.WithHeader("X-Client", door)
		ans, err := c.Submit(t.Context(), "limited", []byte("one"), who)
		if err != nil || ans.Verdict != spillway.Admitted || ans.ID == "" || ans.Queue != "limited" || ans.Duplicate || ans.IdempotencyKey == "" || ans.Attempts != 1 {
			t.Fatalf("%s: first job: %+v, %v; want admitted with an id and a generated idempotency key", door, ans, err)
		}
		before := time.Now()
		ans, err = c.Submit(t.Context(), "limited", []byte("two"), who, client.WithIdempotencyKey(door+"-two"))
		if err != nil || ans.Verdict != spillway.Queued || ans.Position < 1 || ans.NotBefore.Before(before.Add(50*time.Second)) || ans.EstimatedStart.IsZero() {
			t.Fatalf("%s: second job: %+v, %v; want queued about a minute out, with a position", door, ans, err)
		}
		again, err := c.Submit(t.Context(), "limited", []byte("two"), who, client.WithIdempotencyKey(door+"-two"))
		if err != nil || !again.Duplicate || again.ID != ans.ID || again.Verdict != spillway.Queued {
			t.Fatalf("%s: the second job again: %+v, %v; want the duplicate of %s", door, again, err, ans.ID)
		}
		if _, err := c.Submit(t.Context(), "limited", nil, who); err != nil {
			t.Fatalf("%s: third job: %v", door, err)
		}
		ans, err = c.Submit(t.Context(), "limited", nil, who)
		var pe *client.ProblemError
		if !errors.Is(err, client.ErrRejected) || !errors.Is(err, client.ErrRateLimited) || errors.Is(err, client.ErrQueueFull) || !errors.As(err, &pe) {
			t.Fatalf("%s: fourth job: %v; want a rejection, rate-limited", door, err)
		}
		if ans == nil || ans.Verdict != spillway.Rejected || ans.ID != "" || ans.RetryAfter < 50*time.Second || pe.RetryAfter != ans.RetryAfter ||
			pe.Status != http.StatusTooManyRequests || pe.Reason() != "rate-limited" {
			t.Fatalf("%s: fourth job: %+v, %+v; want rejected, retry after about a minute", door, ans, pe)
		}

		// The schedule's options reach the admitter.
		before = time.Now()
		ans, err = c.Submit(t.Context(), "work", nil, client.WithDelay(time.Hour), client.WithPriority(spillway.Low))
		if err != nil || ans.Verdict != spillway.Queued || ans.NotBefore.Before(before.Add(59*time.Minute)) {
			t.Errorf("%s: a job delayed an hour: %+v, %v", door, ans, err)
		}
		ans, err = c.Submit(t.Context(), "work", nil, client.WithNotBefore(before.Add(2*time.Hour)))
		if err != nil || ans.Verdict != spillway.Queued || ans.NotBefore.Sub(before.Add(2*time.Hour)).Abs() > time.Second {
			t.Errorf("%s: a job not before two hours: %+v, %v", door, ans, err)
		}
		waiter := client.WithHeader("X-Client", "wait-"+door)
		if _, err := c.Submit(t.Context(), "limited", nil, waiter); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Submit(t.Context(), "limited", nil, waiter, client.WithMaxWait(time.Second)); !errors.Is(err, client.ErrWaitTooLong) || !errors.Is(err, client.ErrRejected) {
			t.Errorf("%s: a job that would wait a minute, max-wait 1s: %v; want wait-too-long", door, err)
		}
	}
	// Two jobs of each door in READY, two in the backlog: the duplicates
	// and the rejections took nothing.
	js := must(jetstream.New(a.connect(t)))(t)
	if r, b := admittest.Msgs(t, js, "limited", queue.Ready), admittest.Msgs(t, js, "limited", queue.Backlog); r != 4 || b != 4 {
		t.Errorf("READY holds %d jobs and the backlog %d; want 4 and 4", r, b)
	}
}

// The errors a submission can meet, typed on both doors.
func TestErrors(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for door, c := range doors(t, a) {
		_, err := c.Submit(t.Context(), "limited", nil) // no X-Client
		var pe *client.ProblemError
		if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &pe) || pe.Reason() != "bad-key" || pe.Status != 400 {
			t.Errorf("%s: without the key header: %v; want 400 bad-key", door, err)
		}
		_, err = c.Submit(t.Context(), "nope", nil)
		if !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrRejected) {
			t.Errorf("%s: unknown queue: %v; want 404", door, err)
		}
		_, err = c.Submit(t.Context(), "work", bytes.Repeat([]byte("x"), 100))
		if door == "http" && !errors.Is(err, client.ErrTooLarge) {
			t.Errorf("%s: a payload over max_body_bytes: %v; want 413", door, err)
		}
		if _, err := c.Status(t.Context(), "0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s: status of an unknown job: %v; want 404", door, err)
		}
		if _, err := c.Submit(t.Context(), "bad queue", nil); !errors.Is(err, client.ErrInvalidOption) {
			t.Errorf("%s: a queue name that is not one: %v", door, err)
		}
		if _, err := c.Submit(t.Context(), "work", nil, client.WithCost(0)); !errors.Is(err, client.ErrInvalidOption) {
			t.Errorf("%s: cost 0: %v", door, err)
		}
	}
	anon := must(client.NewHTTP(a.httpURL(), client.WithHTTPClient(apitest.Client(t, &http.Client{}))))(t)
	_, err := anon.Submit(t.Context(), "work", nil)
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("without an API key: %v; want 401", err)
	}
	// The NATS door takes the same API keys.
	anonNATS := must(client.NewNATS(a.connect(t)))(t)
	if _, err := anonNATS.Submit(t.Context(), "work", nil); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("over NATS without an API key: %v; want unauthorized", err)
	}
	if _, err := client.NewNATS(a.connect(t), client.WithHTTPClient(&http.Client{})); !errors.Is(err, client.ErrInvalidOption) {
		t.Errorf("NewNATS with an HTTP client: %v", err)
	}
	if _, err := client.NewHTTP("127.0.0.1:8080"); !errors.Is(err, client.ErrInvalidOption) {
		t.Errorf("NewHTTP without a scheme: %v", err)
	}
}

// countingTransport counts the requests it sends; lose makes it drop the
// answer of the first one after the admitter has taken it, as a
// connection broken at the wrong moment would.
type countingTransport struct {
	n    atomic.Int32
	lose atomic.Bool
	keys []string
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.keys = append(c.keys, r.Header.Get("Idempotency-Key"))
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && c.lose.CompareAndSwap(true, false) {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, errors.New("connection reset by a test")
	}
	return resp, err
}

// A submission whose answer is lost is sent again with the same
// idempotency key: the admitter answers it as a duplicate, and holds one
// job.
func TestLostAnswerMakesOneJob(t *testing.T) {
	t.Parallel()
	a := setup(t)
	tr := &countingTransport{}
	tr.lose.Store(true)
	c := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey), client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithRetries(2, 10*time.Millisecond)))(t)
	ans, err := c.Submit(t.Context(), "limited", []byte("once"), client.WithHeader("X-Client", "lost"))
	if err != nil || ans.Verdict != spillway.Admitted || !ans.Duplicate || ans.Attempts != 2 {
		t.Fatalf("%+v, %v; want admitted, a duplicate, on the second attempt", ans, err)
	}
	if tr.n.Load() != 2 || tr.keys[0] != tr.keys[1] || tr.keys[0] != ans.IdempotencyKey {
		t.Fatalf("%d requests with idempotency keys %q; want 2 with the answer's key %s", tr.n.Load(), tr.keys, ans.IdempotencyKey)
	}
	js := must(jetstream.New(a.connect(t)))(t)
	if n := admittest.Msgs(t, js, "limited", queue.Ready) + admittest.Msgs(t, js, "limited", queue.Backlog); n != 1 {
		t.Fatalf("the queue holds %d jobs, want 1", n)
	}
	// No key, no retry after a lost answer: it could take the job twice.
	bare := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey), client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithRetries(2, 10*time.Millisecond), client.WithoutIdempotencyKeys()))(t)
	tr.lose.Store(true)
	var te *client.TransportError
	if _, err := bare.Submit(t.Context(), "limited", nil, client.WithHeader("X-Client", "bare")); !errors.As(err, &te) || tr.n.Load() != 3 {
		t.Fatalf("without an idempotency key: %v after %d requests; want a transport error, not retried", err, tr.n.Load())
	}
}

// A fail-closed store that is down answers 503: the client retries it a
// bounded number of times, then returns ErrUnavailable, on both doors.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t, redistest.WithOwnProcess())
	url := r.URL()
	r.Kill()
	a := setup(t, strings.Replace(testConfig, "queues:", "redis: {url: \""+url+"\", failure_mode: closed, timeout: 50ms}\nqueues:", 1))
	tr := &countingTransport{}
	h := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey), client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithRetries(2, time.Millisecond)))(t)
	n := must(client.NewNATS(a.connect(t), client.WithAPIKey(testKey), client.WithRetries(2, time.Millisecond)))(t)
	for door, c := range map[string]*client.Client{"http": h, "nats": n} {
		ans, err := c.Submit(t.Context(), "work", nil)
		var pe *client.ProblemError
		if ans != nil || !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &pe) || pe.Status != 503 || pe.Reason() != "unavailable" {
			t.Errorf("%s: %+v, %v; want 503 unavailable", door, ans, err)
		}
	}
	if tr.n.Load() != 3 {
		t.Errorf("the HTTP client sent %d requests, want 3 (2 retries)", tr.n.Load())
	}
}

// Wait returns the final record: succeeded, or dead after the handler
// failed for good; Cancel takes a queued job out, and refuses an
// admitted one.
func TestWaitAndCancel(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for door, c := range doors(t, a) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		ok := must(c.Submit(ctx, "work", []byte("fine")))(t)
		bad := must(c.Submit(ctx, "work", []byte("fail")))(t)
		job, err := c.Wait(ctx, ok.ID)
		if err != nil || job.State != spillway.StateSucceeded || job.ID != ok.ID || job.Attempts != 1 || job.FinishedAt.IsZero() {
			t.Errorf("%s: waiting for a job that succeeds: %+v, %v", door, job, err)
		}
		job, err = c.Wait(ctx, bad.ID)
		if err != nil || job.State != spillway.StateDead || !strings.Contains(job.LastError, "told to fail") {
			t.Errorf("%s: waiting for a job that dies: %+v, %v", door, job, err)
		}

		who := client.WithHeader("X-Client", "cancel-"+door)
		admitted := must(c.Submit(ctx, "limited", nil, who))(t)
		queued := must(c.Submit(ctx, "limited", nil, who))(t)
		// The first records are written just after the answers.
		admittest.WaitFor(t, 10*time.Second, "the queued job's record", func() bool {
			j, err := c.Status(ctx, queued.ID)
			return err == nil && j.State == spillway.StateQueued
		})
		job, err = c.Cancel(ctx, queued.ID)
		if err != nil || job.State != spillway.StateCancelled {
			t.Errorf("%s: cancel of a queued job: %+v, %v", door, job, err)
		}
		if job, err := c.Wait(ctx, queued.ID); err != nil || job.State != spillway.StateCancelled {
			t.Errorf("%s: waiting for a cancelled job: %+v, %v", door, job, err)
		}
		admittest.WaitFor(t, 10*time.Second, "the admitted job's record", func() bool {
			_, err := c.Status(ctx, admitted.ID)
			return err == nil
		})
		_, err = c.Cancel(ctx, admitted.ID)
		var pe *client.ProblemError
		if !errors.Is(err, client.ErrConflict) || !errors.As(err, &pe) || pe.State != "admitted" {
			t.Errorf("%s: cancel of an admitted job: %v; want a conflict, state admitted", door, err)
		}
	}
}

// A batch answers each job on its own, on both doors.
func TestSubmitBatch(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for door, c := range doors(t, a) {
		who := client.WithHeader("X-Client", "batch-"+door)
		jobs := []client.BatchJob{
			{Payload: []byte("a"), Options: []client.SubmitOption{who}},
			{Payload: []byte{0xff, 0}, Options: []client.SubmitOption{who, client.WithPriority(spillway.High)}},
			{Payload: []byte("c"), Options: []client.SubmitOption{who}},
			{Payload: []byte("d"), Options: []client.SubmitOption{who}},
			{Payload: []byte("e")}, // no key header
		}
		res, err := c.SubmitBatch(t.Context(), "limited", jobs)
		if err != nil || len(res) != 5 {
			t.Fatalf("%s: %v, %d results", door, err, len(res))
		}
		want := []spillway.Status{spillway.Admitted, spillway.Queued, spillway.Queued, spillway.Rejected}
		for i, v := range want {
			if res[i].Answer == nil || res[i].Answer.Verdict != v || (v == spillway.Rejected) != errors.Is(res[i].Err, client.ErrRateLimited) {
				t.Errorf("%s: job %d: %+v, %v; want %s", door, i, res[i].Answer, res[i].Err, v)
			}
		}
		if res[4].Answer != nil || !errors.Is(res[4].Err, client.ErrBadRequest) {
			t.Errorf("%s: job without its key: %+v, %v; want a bad request", door, res[4].Answer, res[4].Err)
		}
		// Sent again, the jobs keep their keys: nothing new is taken.
		b := must(c.PrepareBatch([]client.BatchJob{{Payload: []byte("p"), Options: []client.SubmitOption{client.WithHeader("X-Client", "prepared-"+door)}}}))(t)
		first := must(c.SubmitPrepared(t.Context(), "limited", b))(t)
		again := must(c.SubmitPrepared(t.Context(), "limited", b))(t)
		if first[0].Err != nil || again[0].Answer == nil || !again[0].Answer.Duplicate || again[0].Answer.ID != first[0].Answer.ID {
			t.Errorf("%s: a prepared batch sent twice: %+v then %+v", door, first[0], again[0])
		}
		if _, err := c.SubmitBatch(t.Context(), "nope", jobs[:1]); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s: a batch to an unknown queue: %v", door, err)
		}
	}
}

// A batch's jobs share their first status records (one per 64 jobs, not
// one each): both doors read them, cancel a queued job of the batch, and
// refuse to cancel an admitted one.
func TestBatchJobsStatus(t *testing.T) {
	t.Parallel()
	a := setup(t)
	js := must(jetstream.New(a.connect(t)))(t)
	for door, c := range doors(t, a) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		who := client.WithHeader("X-Client", "batch-status-"+door)
		jobs := []client.BatchJob{{Options: []client.SubmitOption{who}}, {Options: []client.SubmitOption{who}}, {Options: []client.SubmitOption{who}}}
		res := must(c.SubmitBatch(ctx, "limited", jobs))(t)
		want := []spillway.State{spillway.StateAdmitted, spillway.StateQueued, spillway.StateQueued}
		for i, r := range res {
			if r.Err != nil || r.Answer == nil {
				t.Fatalf("%s: job %d: %v", door, i, r.Err)
			}
		}
		admittest.WaitFor(t, 10*time.Second, "the batch's records", func() bool {
			for i, r := range res {
				if j, err := c.Status(ctx, r.Answer.ID); err != nil || j.State != want[i] || j.Queue != "limited" {
					return false
				}
			}
			return true
		})
		for i, r := range res {
			// No job has a record of its own: they are in their group's.
			kv := must(js.KeyValue(ctx, jobstatus.BucketOf(r.Answer.ID)))(t)
			if _, err := kv.Get(ctx, r.Answer.ID); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s: job %d has a record of its own (%v), want its group's only", door, i, err)
			}
		}
		queued := res[1].Answer.ID
		if job, err := c.Cancel(ctx, queued); err != nil || job.State != spillway.StateCancelled {
			t.Errorf("%s: cancel of a queued batch job: %+v, %v", door, job, err)
		}
		if job, err := c.Wait(ctx, queued); err != nil || job.State != spillway.StateCancelled {
			t.Errorf("%s: waiting for the cancelled batch job: %+v, %v", door, job, err)
		}
		var pe *client.ProblemError
		if _, err := c.Cancel(ctx, res[0].Answer.ID); !errors.Is(err, client.ErrConflict) || !errors.As(err, &pe) || pe.State != "admitted" {
			t.Errorf("%s: cancel of an admitted batch job: %v; want a conflict, state admitted", door, err)
		}
		if j, err := c.Status(ctx, res[2].Answer.ID); err != nil || j.State != spillway.StateQueued {
			t.Errorf("%s: the other queued job after the cancel: %+v, %v; want queued", door, j, err)
		}
	}
}

// Wait over NATS for a batch's job whose group record came after the
// watch began (the admitter writes it just after its answer) waits on past
// the 5 s it gives a job with no record, and returns the job's outcome.
func TestWaitFindsALateGroupRecord(t *testing.T) {
	t.Parallel()
	a := setup(t)
	nc := a.connect(t)
	js := must(jetstream.New(nc))(t)
	store := must(jobstatus.OpenExisting(t.Context(), js))(t)
	c := must(client.NewNATS(nc, client.WithAPIKey(testKey)))(t)
	ids := must(queue.NewJobIDs("limited", 2))(t)
	now := time.Now()
	sub := door.KeyFingerprint(testKey) // the client's jobs
	recs := []jobstatus.Record{{ID: ids[0], Queue: "limited", State: spillway.StateAdmitted, EnqueuedAt: now, UpdatedAt: now, Submitter: sub},
		{ID: ids[1], Queue: "limited", State: spillway.StateAdmitted, EnqueuedAt: now, UpdatedAt: now, Submitter: sub}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type result struct {
		job *spillway.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		job, err := c.Wait(ctx, ids[0])
		done <- result{job, err}
	}()
	time.Sleep(300 * time.Millisecond)
	for _, m := range must(jobstatus.FirstMsgs(recs))(t) {
		must(js.PublishMsg(ctx, m))(t)
	}
	select {
	case r := <-done:
		t.Fatalf("Wait returned before the job ended: %+v, %v", r.job, r.err)
	case <-time.After(5500 * time.Millisecond): // past the grace for a job with no record
	}
	if err := store.Put(ctx, jobstatus.Record{ID: ids[0], Queue: "limited", State: spillway.StateSucceeded, Attempts: 1, EnqueuedAt: now, FinishedAt: time.Now(), Submitter: sub}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.job.State != spillway.StateSucceeded {
			t.Errorf("Wait: %+v, %v; want succeeded", r.job, r.err)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after the job's outcome")
	}
}
