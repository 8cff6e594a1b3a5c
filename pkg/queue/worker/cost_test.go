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
)

// A Go handler reports a job's actual cost with Job.SetCostActual: the
// worker hands it to SettleCost after the success and before the job's
// outcome; a job that reports its own cost, or none, is not handed over;
// a SettleCost that fails leaves the job succeeded and acked all the same.
func TestSettleCostBeforeTheOutcome(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("cost"))
	var (
		mu       sync.Mutex
		settled  = map[string]int64{}
		outcomes = map[string]bool{} // job id → settled before its outcome
		done     = map[string]bool{}
	)
	cheap, same, silent, failing := queuetest.NewJob(t, "cost", "k"), queuetest.NewJob(t, "cost", "k"), queuetest.NewJob(t, "cost", "k"), queuetest.NewJob(t, "cost", "k")
	for _, j := range []*queue.Job{cheap, same, silent, failing} {
		j.Cost = 5
	}
	cfg := worker.WorkerConfig{
		Queue: b.Config,
		SettleCost: func(_ context.Context, j *queue.Job, actual int64) error {
			mu.Lock()
			defer mu.Unlock()
			settled[j.ID] = actual
			if j.ID == failing.ID {
				return errors.New("no admitter answers")
			}
			return nil
		},
		Outcome: func(_ context.Context, e worker.Event) error {
			mu.Lock()
			defer mu.Unlock()
			_, ok := settled[e.Job.ID]
			outcomes[e.Job.ID] = ok
			return nil
		},
		Observe: func(e worker.Event) {
			if e.Kind == worker.Succeeded {
				mu.Lock()
				done[e.Job.ID] = true
				mu.Unlock()
			}
		},
	}
	queuetest.RunWorker(t, b.JS, cfg, func(_ context.Context, j *queue.Job) error {
		switch j.ID {
		case cheap.ID, failing.ID:
			j.SetCostActual(2)
		case same.ID:
			j.SetCostActual(5)
		}
		return nil
	})
	for _, j := range []*queue.Job{cheap, same, silent, failing} {
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(done)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 jobs succeeded after 10s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != 2 || settled[cheap.ID] != 2 || settled[failing.ID] != 2 {
		t.Errorf("settled %v; want the two jobs that cost 2 instead of 5, at 2", settled)
	}
	for _, j := range []*queue.Job{cheap, failing} {
		if !outcomes[j.ID] {
			t.Errorf("job %s: its outcome came before its cost was settled", j.ID)
		}
	}
	// A failed settle does not hold the job: it left READY, acked.
	if m, err := queue.FindReady(ctx, b.JS, "cost", failing.ID); err != nil || m != nil {
		t.Errorf("the job whose settle failed: in READY %v (%v); want it acked and gone", m != nil, err)
	}
}
