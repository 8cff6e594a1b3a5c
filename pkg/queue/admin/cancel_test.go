package admin_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// CancelBacklogJob deletes the job it is told of, only that job, and
// finds a message that is gone already no error.
func TestCancelBacklogJob(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("cancel"))
	a, c := queuetest.NewJob(t, "cancel", "k"), queuetest.NewJob(t, "cancel", "k")
	sa, err := b.Pub.Publish(ctx, queue.Backlog, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pub.Publish(ctx, queue.Backlog, c); err != nil {
		t.Fatal(err)
	}
	if err := admin.CancelBacklogJob(ctx, b.JS, "cancel", sa.Sequence, c.ID); !errors.Is(err, admin.ErrNotThisJob) {
		t.Errorf("cancel job c at job a's place: %v, want ErrNotThisJob", err)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("cancel", queue.Backlog)); n != 2 {
		t.Fatalf("the backlog holds %d jobs after a refused cancel, want 2", n)
	}
	for range 2 { // the second time, it is gone already
		if err := admin.CancelBacklogJob(ctx, b.JS, "cancel", sa.Sequence, a.ID); err != nil {
			t.Fatalf("cancel job a: %v", err)
		}
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("cancel", queue.Backlog)); n != 1 {
		t.Errorf("the backlog holds %d jobs after job a's cancel, want 1", n)
	}
	if err := admin.CancelBacklogJob(ctx, b.JS, "cancel", 0, a.ID); err == nil {
		t.Error("cancel at sequence 0: no error")
	}
}

// A backlog job its start gate finds cancelled never reaches the handler,
// and leaves the backlog; a gate that fails holds the job back until it
// answers, and the job then runs once.
func TestStartGate(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("gate"))
	cancelled, flaky, plain := queuetest.NewJob(t, "gate", "a"), queuetest.NewJob(t, "gate", "b"), queuetest.NewJob(t, "gate", "c")
	for _, j := range []*queue.Job{cancelled, flaky, plain} {
		if _, err := b.Pub.Publish(ctx, queue.Backlog, j); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu         sync.Mutex
		ran        = map[string]int{}
		asked      = map[string]int{}
		flakyFails atomic.Int32
	)
	gate := func(_ context.Context, e worker.Event) error {
		mu.Lock()
		defer mu.Unlock()
		asked[e.Job.ID]++
		if e.Kind != worker.Started || e.Attempt != 1 || e.Stream != queue.StreamName("gate", queue.Backlog) || e.Sequence == 0 {
			t.Errorf("gate asked with %+v; want the Started event of a first try from the backlog", e)
		}
		switch e.Job.ID {
		case cancelled.ID:
			return worker.ErrJobCancelled
		case flaky.ID:
			if flakyFails.Add(1) == 1 {
				return errors.New("status store unreachable")
			}
		}
		return nil
	}
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, FetchWait: 50 * time.Millisecond, StartGate: gate}, func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		ran[j.ID]++
		mu.Unlock()
		return nil
	})
	deadline := time.Now().Add(15 * time.Second)
	for queuetest.Stored(t, ctx, b.JS, queue.StreamName("gate", queue.Backlog)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the backlog did not empty within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran[cancelled.ID] != 0 || ran[flaky.ID] != 1 || ran[plain.ID] != 1 {
		t.Errorf("handler runs %v; want none of the cancelled job %s, one each of the others", ran, cancelled.ID)
	}
	if asked[flaky.ID] != 2 || asked[cancelled.ID] != 1 {
		t.Errorf("gate asked %v; want the flaky job twice, the cancelled one once", asked)
	}
}
