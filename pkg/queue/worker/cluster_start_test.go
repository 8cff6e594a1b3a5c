package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A worker started while two servers of three are down cannot have its
// queue's R3 streams and buckets made: the server left refuses them ("no
// suitable peers for placement, peer offline"), or leaves a request
// unanswered. It waits, saying why, and works once the servers are back,
// rather than failing at its start. (A young cluster that had not yet
// heard from a server refused a worker so in a test of leader loss.)
func TestWorkerStartWaitsForServersDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := queuetest.StartCluster(t, 3)
	down := c.Nodes()[1:]
	for _, n := range down {
		n.Shutdown()
	}

	cfg := queue.Config{Name: "later", Replicas: 3, Capacity: 100, LeakRate: bucket.Rate{Count: 100, Per: time.Second}}
	logs := &lockedBuffer{}
	ran := make(chan string, 1)
	w, err := worker.NewWorker(c.JetStream(t), worker.WorkerConfig{Queue: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		func(_ context.Context, j *queue.Job) error {
			select {
			case ran <- j.ID:
			default:
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	const waiting = "cannot set up the queue's streams and buckets yet"
	waitCluster(t, time.Minute, "the worker saying it waits for the cluster", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the worker stopped while a server was down: %v", err)
		default:
		}
		return strings.Contains(logs.String(), waiting)
	})
	for _, n := range down {
		n.Restart(t)
	}

	// Once the worker has made the streams, a job published runs.
	js := c.JetStream(t)
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	j := queuetest.NewJob(t, cfg.Name, "k")
	waitCluster(t, time.Minute, "a job published after the server came back", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := pub.Publish(pctx, queue.Ready, j)
		return err == nil
	})
	select {
	case id := <-ran:
		if id != j.ID {
			t.Errorf("ran job %s, want %s", id, j.ID)
		}
	case err := <-done:
		t.Fatalf("the worker stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the job did not run within a minute of its publish")
	}
}
