package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// A pushback from one job, in one of two workers, pauses the backlog leak
// of both for its Retry-After: only the starts booked before it (each
// drainer holds a couple) run during the pause, where 50/s would have run
// about a hundred. The pushed-back job itself retries no sooner than its
// Retry-After.
func TestPushbackPausesTheLeakForOtherBacklogJobs(t *testing.T) {
	t.Parallel()
	const jobs, workers, pause = 80, 2, 2 * time.Second
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("push")) // 50/s
	kv, err := pace.OpenPacerBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		publishBacklog(t, ctx, b, fmt.Sprintf("k%02d", i%20), 1, time.Time{})
	}
	var (
		mu       sync.Mutex
		pushedAt time.Time
		pushedID string
		retried  time.Time
		starts   []time.Time // backlog starts but the pushed-back job's first
	)
	rec := newRecorder()
	handler := func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case pushedID == "":
			pushedID, pushedAt = j.ID, time.Now()
			return retry.Pushback(errors.New("webhook: 429 Too Many Requests"), pause)
		case j.ID == pushedID:
			retried = time.Now()
		default:
			starts = append(starts, time.Now())
		}
		return nil
	}
	for range workers {
		kp, err := pace.NewKVPacer(kv, b.Config.Name, b.Config.LeakRate)
		if err != nil {
			t.Fatal(err)
		}
		yp, err := pace.NewYieldingPacer(kp, kv, b.Config.Name, b.Config.LeakRate, false)
		if err != nil {
			t.Fatal(err)
		}
		queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Pacer: yp, Observe: rec.observe}, handler)
	}
	rec.waitFor(t, 30*time.Second, "every job done", func() bool { return rec.count(worker.Succeeded) == jobs })

	st, err := pace.ReadLeakState(ctx, kv, b.Config.Name)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if d := st.PausedUntil.Sub(pushedAt); d < pause-100*time.Millisecond || d > pause+time.Second {
		t.Fatalf("shared pause ends %v after the pushback, want about %v: %+v", d, pause, st)
	}
	during := 0
	for _, s := range starts {
		if s.After(pushedAt) && s.Before(st.PausedUntil) {
			during++
		}
	}
	// Starts booked before the pause still run: a couple per drainer.
	if most := 3 * workers; during > most {
		t.Errorf("%d backlog jobs started during the %v pause, want at most %d (the bookings made before it)", during, pause, most)
	}
	if retried.Sub(pushedAt) < pause {
		t.Errorf("the pushed-back job retried %v after its pushback, before its Retry-After %v", retried.Sub(pushedAt), pause)
	}
	// Its retry went back through the backlog, at the leak's pace, not to
	// READY: its second start was a backlog release, its second try.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	released := 0
	for _, e := range rec.events {
		if e.Kind == worker.Released && e.Job.ID == pushedID {
			released++
			if released == 2 && (e.Attempt != 2 || e.Stream != queue.StreamName(b.Config.Name, queue.Backlog)) {
				t.Errorf("the pushed-back job's retry: attempt %d from %s, want attempt 2 from the backlog", e.Attempt, e.Stream)
			}
		}
	}
	if released != 2 {
		t.Errorf("the pushed-back job was released from the backlog %d times, want 2 (its retry goes back to the backlog)", released)
	}
}
