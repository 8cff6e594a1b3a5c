package admit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// releases runs a worker of queue q (no-op handler) until the test ends and
// records when each backlog job left the backlog.
type releases struct {
	mu sync.Mutex
	at map[string]time.Time
}

func startWorker(t *testing.T, b *testBundle, q string) *releases {
	t.Helper()
	r := &releases{at: map[string]time.Time{}}
	cfg := b.Config.Queue(q).Backlog
	cfg.Memory = true
	w, err := worker.NewWorker(b.JS, worker.WorkerConfig{Queue: cfg, Concurrency: 4, Observe: func(e worker.Event) {
		if e.Kind == worker.Released {
			r.mu.Lock()
			r.at[e.Job.ID] = time.Now()
			r.mu.Unlock()
		}
	}}, func(context.Context, *queue.Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	// Draining: a pull request waits on the backlog consumer.
	admittest.WaitFor(t, 20*time.Second, "the worker to pull from the backlog", func() bool {
		in, err := admin.Inspect(context.Background(), b.JS, cfg)
		return err == nil && in.BacklogPullers > 0 && in.ReadyPullers > 0
	})
	return r
}

func (r *releases) of(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[id]
	return at, ok
}

// retryAt submits a job again at the time ans said, and checks it is not
// rejected again. freed reports when the job that makes room was released
// (its handler starts; the backlog lets it go once that returns), and late
// whether that release came after the drain's schedule. A loaded
// machine's drain may run behind its schedule: a retry rejected because
// the release that makes room came late, not because the answer was
// early, is submitted again until the room is there, at most 2 s after
// that release. Any other rejection fails the test.
func retryAt(t *testing.T, a *admit.Admitter, r func() *admit.Request, answered time.Time, ans admit.Answer, freed func() (time.Time, bool), late func(released time.Time) bool) {
	t.Helper()
	if ans.Reply.RetryAfterMS <= 0 {
		t.Fatalf("rejected with retry_after_ms %d", ans.Reply.RetryAfterMS)
	}
	sent := answered.Add(time.Duration(ans.Reply.RetryAfterMS) * time.Millisecond)
	time.Sleep(time.Until(sent))
	retried := submit(t, a, r())
	if retried.Reply.Status != spillway.Rejected {
		if _, ok := freed(); !ok {
			t.Fatalf("retried after retry_after_ms %d: %s before the job that makes room was released", ans.Reply.RetryAfterMS, retried.Reply.Status)
		}
		return
	}
	admittest.WaitFor(t, 10*time.Second, "the job that makes room to be released", func() bool {
		_, ok := freed()
		return ok
	})
	at, _ := freed()
	if !late(at) {
		t.Fatalf("retried after retry_after_ms %d: %s again (%+v), though the drain released the job that makes room on time, %v from the retry",
			ans.Reply.RetryAfterMS, retried.Reply.Type, retried.Reply, at.Sub(sent).Round(time.Millisecond))
	}
	admittest.WaitFor(t, 2*time.Second, "a retry to be stored after the late release", func() bool {
		return submit(t, a, r()).Reply.Status != spillway.Rejected
	})
	t.Logf("the retry at retry_after_ms %d came before the room: the drain, running late, released the job that makes room %v from the retry, and the room was there %v after that",
		ans.Reply.RetryAfterMS, at.Sub(sent).Round(time.Millisecond), time.Since(at).Round(time.Millisecond))
}

// releasedAfter returns a late func for retryAt: a release is late when
// it comes more than the margin retry-after answers add (200 ms) after
// due.
func releasedAfter(due time.Time) func(time.Time) bool {
	return func(at time.Time) bool { return at.After(due.Add(200 * time.Millisecond)) }
}

// checkHonest checks that the answer was at most one leak slot plus 1s after the slot freed
// (freed: when the job that made room left the backlog).
func checkHonest(t *testing.T, answered time.Time, ans admit.Answer, freed time.Time, slot time.Duration) {
	t.Helper()
	at := answered.Add(time.Duration(ans.Reply.RetryAfterMS) * time.Millisecond)
	if late := at.Sub(freed); late > slot+time.Second {
		t.Errorf("retry_after_ms %d: %v after the slot freed, want at most a leak slot (%v) plus 1s", ans.Reply.RetryAfterMS, late, slot)
	}
	t.Logf("retry_after_ms %d; the slot freed %v after the answer", ans.Reply.RetryAfterMS, freed.Sub(answered))
}

// A key whose share of the backlog is full is told to come back when its
// first queued job is released, not one leak slot later.
func TestRetryAfterKeyFull(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 10}
    backlog: {capacity: 100, per_key_capacity: 3, leak_rate: 100/s}
`, setupOptions{})
	rel := startWorker(t, b, "q")
	var got []admit.Answer
	for range 4 {
		got = append(got, submit(t, a, request("q", "c")))
	}
	ans := submit(t, a, request("q", "c"))
	answered := time.Now()
	if ans.Reply.Status != spillway.Rejected || ans.Reply.Type != spillway.ProblemKeyFull {
		t.Fatalf("5th job of a key with per_key_capacity 3: %+v, want rejected %s", ans.Reply, spillway.ProblemKeyFull)
	}
	first := got[1]
	if first.Reply.NotBefore == nil {
		t.Fatalf("the second job of a key with per_key_capacity 3: %+v, want queued with a not_before", first.Reply)
	}
	if nb := *first.Reply.NotBefore; answered.Add(time.Duration(ans.Reply.RetryAfterMS) * time.Millisecond).Before(nb) {
		t.Errorf("retry_after_ms %d: before the key's first queued job is due (%v after the answer)", ans.Reply.RetryAfterMS, nb.Sub(answered))
	}
	retryAt(t, a, func() *admit.Request { return request("q", "c") }, answered, ans, func() (time.Time, bool) { return rel.of(first.Reply.ID) }, releasedAfter(*first.Reply.NotBefore))
	freed, _ := rel.of(first.Reply.ID)
	checkHonest(t, answered, ans, freed, 10*time.Millisecond)
}

// A full backlog whose jobs are not due yet frees a slot when the
// earliest is due and released.
func TestRetryAfterQueueFullNotDue(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 10}
    backlog: {capacity: 3, leak_rate: 100/s}
`, setupOptions{})
	rel := startWorker(t, b, "q")
	var got []admit.Answer
	for range 4 {
		got = append(got, submit(t, a, request("q", "c")))
	}
	ans := submit(t, a, request("q", "c"))
	answered := time.Now()
	if ans.Reply.Status != spillway.Rejected || ans.Reply.Type != spillway.ProblemQueueFull {
		t.Fatalf("a job for a full backlog: %+v, want rejected %s", ans.Reply, spillway.ProblemQueueFull)
	}
	if got[1].Reply.NotBefore == nil {
		t.Fatalf("the second job for a backlog of 3: %+v, want queued with a not_before", got[1].Reply)
	}
	if nb := *got[1].Reply.NotBefore; answered.Add(time.Duration(ans.Reply.RetryAfterMS) * time.Millisecond).Before(nb) {
		t.Errorf("retry_after_ms %d: before the earliest queued job is due (%v after the answer)", ans.Reply.RetryAfterMS, nb.Sub(answered))
	}
	retryAt(t, a, func() *admit.Request { return request("q", "c") }, answered, ans, func() (time.Time, bool) { return rel.of(got[1].Reply.ID) }, releasedAfter(*got[1].Reply.NotBefore))
	freed, _ := rel.of(got[1].Reply.ID)
	checkHonest(t, answered, ans, freed, 10*time.Millisecond)
}

// A full backlog of due jobs frees a slot at the next release of the leak.
func TestRetryAfterQueueFullDue(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 3, leak_rate: 2/s}
`, setupOptions{})
	rel := startWorker(t, b, "q")
	var ans admit.Answer
	var answered time.Time
	var queued []string
	for range 10 {
		ans = submit(t, a, request("q", "c"))
		answered = time.Now()
		if ans.Reply.Status == spillway.Rejected {
			break
		}
		if ans.Reply.Status == spillway.Queued {
			queued = append(queued, ans.Reply.ID)
		}
	}
	if ans.Reply.Status != spillway.Rejected || ans.Reply.Type != spillway.ProblemQueueFull {
		t.Fatalf("10 jobs into a backlog of 3 drained at 2/s: the last %+v, want rejected %s", ans.Reply, spillway.ProblemQueueFull)
	}
	// The slot freed at the first release after the answer.
	freed := func() (time.Time, bool) {
		var first time.Time
		for _, id := range queued {
			if at, ok := rel.of(id); ok && at.After(answered) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		return first, !first.IsZero()
	}
	// Due one slot (500 ms) after the release before it; without one, the
	// test has no schedule to blame and the release counts as on time.
	late := func(at time.Time) bool {
		var prev time.Time
		for _, id := range queued {
			if r, ok := rel.of(id); ok && r.Before(at) && r.After(prev) {
				prev = r
			}
		}
		return !prev.IsZero() && releasedAfter(prev.Add(500*time.Millisecond))(at)
	}
	retryAt(t, a, func() *admit.Request { return request("q", "c") }, answered, ans, freed, late)
	at, _ := freed()
	checkHonest(t, answered, ans, at, 500*time.Millisecond)
}
