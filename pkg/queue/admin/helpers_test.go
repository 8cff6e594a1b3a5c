package admin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

type bundle struct {
	srv *queuetest.Server
	js  jetstream.JetStream
	pub *queue.Publisher
	cfg queue.Config
}

func setup(t *testing.T, cfg queue.Config) (context.Context, *bundle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, &bundle{srv: srv, js: js, pub: pub, cfg: cfg}
}

func newJob(t *testing.T, q, key string) *queue.Job {
	t.Helper()
	id, err := queue.NewJobID()
	if err != nil {
		t.Fatal(err)
	}
	return &queue.Job{ID: id, Queue: q, Key: key, Cost: 1, Payload: []byte("payload of " + id), EnqueuedAt: time.Now()}
}

func stored(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// runWorker runs a worker until the test ends, then stops it and checks
// that Run returned nil.
func runWorker(t *testing.T, js jetstream.JetStream, cfg worker.WorkerConfig, h worker.Handler) context.CancelFunc {
	t.Helper()
	w, err := worker.NewWorker(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker Run: %v", err)
			}
		case <-time.After(cfg.GracePeriod + 15*time.Second):
			t.Errorf("worker did not stop")
		}
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

func testQueue(name string) queue.Config {
	return queue.Config{Name: name, Capacity: 1000, Memory: true, LeakRate: bucket.Rate{Count: 50, Per: time.Second}}
}
