package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// A READY job's outcome is handed to Outcome while the job is still in
// READY — before its ack, and for a dead letter after its copy to DEAD —
// so that a reader who looks in READY, then in what Outcome wrote, always
// finds the job; the outcome is observed afterwards as every event is.
func TestOutcomeComesBeforeTheAck(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("outcome"))
	type seen struct {
		kind    worker.EventKind
		inReady bool
		queue   string
	}
	var (
		mu       sync.Mutex
		outcomes = map[string]seen{}
		observed = map[string]worker.EventKind{}
	)
	outcome := func(ctx context.Context, e worker.Event) error {
		m, err := queue.FindReady(ctx, b.JS, "outcome", e.Job.ID)
		if err != nil {
			return err
		}
		mu.Lock()
		outcomes[e.Job.ID] = seen{kind: e.Kind, inReady: m != nil, queue: e.Queue}
		mu.Unlock()
		return nil
	}
	observe := func(e worker.Event) {
		if e.Kind != worker.Succeeded && e.Kind != worker.DeadLettered {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := outcomes[e.Job.ID]; !ok {
			t.Errorf("job %s: %v observed before its outcome was handed over", e.Job.ID, e.Kind)
		}
		observed[e.Job.ID] = e.Kind
	}
	ok, bad := queuetest.NewJob(t, "outcome", "k"), queuetest.NewJob(t, "outcome", "k")
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: observe, Outcome: outcome},
		func(_ context.Context, j *queue.Job) error {
			if j.ID == bad.ID {
				return retry.Permanent(errors.New("no such mailbox"))
			}
			return nil
		})
	for _, j := range []*queue.Job{ok, bad} {
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(observed)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 outcomes observed after 10s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string]worker.EventKind{ok.ID: worker.Succeeded, bad.ID: worker.DeadLettered} {
		if got := outcomes[id]; got.kind != want || !got.inReady || got.queue != "outcome" {
			t.Errorf("job %s: outcome %+v, want %v handed over while the job was in READY, of queue outcome", id, got, want)
		}
	}
	for _, j := range []*queue.Job{ok, bad} {
		if m, err := queue.FindReady(ctx, b.JS, "outcome", j.ID); m != nil || err != nil {
			t.Errorf("job %s still in READY after its outcome: %v, %v", j.ID, m, err)
		}
	}
}
