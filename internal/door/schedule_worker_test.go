package door_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// starts records the handler's calls of a worker the test runs.
type starts struct {
	mu   sync.Mutex
	at   map[string]time.Time
	poke chan struct{}
}

// runRecordingWorker runs a worker for queue q of b's configuration, its events
// feeding the job-status records as a worker process's do, until the test
// ends.
func runRecordingWorker(t *testing.T, b *testBundle, q string) *starts {
	t.Helper()
	s := &starts{at: map[string]time.Time{}, poke: make(chan struct{}, 1)}
	runHandlerWorker(t, b, q, retry.Policy{}, func(_ context.Context, j *queue.Job) error {
		s.mu.Lock()
		s.at[j.ID] = time.Now()
		s.mu.Unlock()
		select {
		case s.poke <- struct{}{}:
		default:
		}
		return nil
	})
	return s
}

func (s *starts) of(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[id]
	return at, ok
}

// jobState polls GET /v1/jobs/{id} until its state is want, failing after
// d.
func (b *testBundle) jobState(t *testing.T, id string, want spillway.State, d time.Duration) jobstatus.Record {
	t.Helper()
	deadline := time.Now().Add(d)
	var rec jobstatus.Record
	for {
		r := b.get(t, "/v1/jobs/"+id)
		if r.code == http.StatusOK {
			if err := json.Unmarshal(r.body, &rec); err != nil {
				t.Fatalf("GET /v1/jobs/%s: %s: %v", id, r.body, err)
			}
			if rec.State == want {
				return rec
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: job %s is %d %s, want state %s", d, id, r.code, r.body, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A job scheduled 5 s ahead through the HTTP door starts no earlier, with
// a real worker draining its backlog.
func TestScheduledJobStartsNoEarlier(t *testing.T) {
	t.Parallel()
	b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/s, burst: 10}
    backlog: {capacity: 100, leak_rate: 10/s}
`, setupOptions{})
	s := runRecordingWorker(t, b, "q")
	r := b.post(t, "q", []byte("later"), "X-Client", "a", spillway.HeaderDelay, "5s")
	if r.code != http.StatusAccepted || r.reply.Status != spillway.Queued || r.reply.NotBefore == nil {
		t.Fatalf("%s 5s: %d %s, want 202 queued with a not_before", spillway.HeaderDelay, r.code, r.body)
	}
	// A job of the same key submitted after it runs at once.
	now := b.post(t, "q", []byte("now"), "X-Client", "a")
	b.jobState(t, now.reply.ID, spillway.StateSucceeded, 20*time.Second)
	b.jobState(t, r.reply.ID, spillway.StateSucceeded, 30*time.Second)
	at, _ := s.of(r.reply.ID)
	if at.Before(*r.reply.NotBefore) {
		t.Errorf("the scheduled job started %v before its not_before", r.reply.NotBefore.Sub(at))
	}
}

// A queued job with Spillway-Max-Wait 2 s, behind a leak of one start a
// minute that the previous job took, is never run: the drain
// dead-letters it with reason expired, and its status says expired.
func TestMaxWaitExpiresQueuedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, `
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 100, leak_rate: 1/m}
`, setupOptions{})
	s := runRecordingWorker(t, b, "q")
	if r := b.post(t, "q", nil); r.reply.Status != spillway.Admitted {
		t.Fatalf("first job: %d %s, want admitted", r.code, r.body)
	}
	// The backlog's first job takes the leak's start for this minute.
	first := b.post(t, "q", nil)
	if first.reply.Status != spillway.Queued {
		t.Fatalf("second job: %d %s, want queued", first.code, first.body)
	}
	b.jobState(t, first.reply.ID, spillway.StateSucceeded, 20*time.Second)
	// The backlog is empty again: the estimate says at once, the leak's
	// next start is a minute away.
	r := b.post(t, "q", []byte("in time or never"), spillway.HeaderMaxWait, "2s")
	if r.code != http.StatusAccepted || r.reply.Status != spillway.Queued {
		t.Fatalf("max-wait 2s in an empty backlog: %d %s, want 202 queued", r.code, r.body)
	}
	rec := b.jobState(t, r.reply.ID, spillway.StateExpired, 20*time.Second)
	if _, ran := s.of(r.reply.ID); ran {
		t.Error("the expired job ran")
	}
	if rec.LastError == "" {
		t.Error("the expired job's status has no last error")
	}
	dl, err := admin.OpenDeadLetters(context.Background(), b.JS, "q")
	if err != nil {
		t.Fatal(err)
	}
	letters, err := dl.List(context.Background(), admin.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 1 || letters[0].ID != r.reply.ID || letters[0].Reason != queue.ReasonExpired {
		t.Errorf("dead letters %+v, want the job with reason %s", letters, queue.ReasonExpired)
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 0 {
		t.Errorf("the backlog holds %d jobs", n)
	}
}
