package queuetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Queue is one queue's streams on a Server of their own, with a
// publisher: where a test of pkg/queue, its worker or its operator's view
// starts.
//
//	ctx, q := queuetest.StartQueue(t, queuetest.QueueConfig("mail"))
//	job := queuetest.NewJob(t, "mail", "customer-1")
//	if _, err := q.Pub.Publish(ctx, queue.Ready, job); err != nil {
//		t.Fatal(err)
//	}
//	queuetest.RunWorker(t, q.JS, worker.WorkerConfig{Queue: q.Config}, handle)
type Queue struct {
	Server *Server
	JS     jetstream.JetStream // on a connection closed in t.Cleanup
	Pub    *queue.Publisher
	Config queue.Config // as given to StartQueue
}

// StartQueue starts a Server and creates cfg's streams on it. The context
// it returns ends a minute later or when the test ends: a bound for the
// test's own calls.
func StartQueue(tb testing.TB, cfg queue.Config) (context.Context, *Queue) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	srv := Start(tb)
	js := srv.JetStream(tb)
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		tb.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return ctx, &Queue{Server: srv, JS: js, Pub: pub, Config: cfg}
}

// QueueConfig is a queue named name of 1000 jobs kept in memory, leaking
// 50 a second.
func QueueConfig(name string) queue.Config {
	return queue.Config{Name: name, Capacity: 1000, Memory: true, LeakRate: bucket.Rate{Count: 50, Per: time.Second}}
}

// NewJob is a job of queue q and key with a new id, cost 1 and the payload
// "payload of " + its id, enqueued now.
func NewJob(tb testing.TB, q, key string) *queue.Job {
	tb.Helper()
	id, err := queue.NewJobID(q)
	if err != nil {
		tb.Fatal(err)
	}
	return &queue.Job{ID: id, Queue: q, Key: key, Cost: 1, Payload: []byte("payload of " + id), EnqueuedAt: time.Now()}
}

// Stored is how many messages stream holds.
func Stored(tb testing.TB, ctx context.Context, js jetstream.JetStream, stream string) uint64 {
	tb.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Msgs
}

// PublishAll publishes jobs to d all at once, each from a goroutine of its
// own, and counts the outcomes: stored, refused with queue.ErrQueueFull,
// refused with queue.ErrKeyQueueFull, and any other error.
func (q *Queue) PublishAll(ctx context.Context, d queue.Destination, jobs []*queue.Job) (ok, full, keyFull int, other []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			_, err := q.Pub.Publish(ctx, d, j)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, queue.ErrKeyQueueFull):
				keyFull++
			case errors.Is(err, queue.ErrQueueFull):
				full++
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	return ok, full, keyFull, other
}

// RunWorker runs a worker of cfg with handler h until stop is called or
// the test ends, whichever comes first. Stopping cancels Run's context and
// fails the test unless Run returns nil within cfg.GracePeriod + 15s.
func RunWorker(tb testing.TB, js jetstream.JetStream, cfg worker.WorkerConfig, h worker.Handler) (stop func()) {
	tb.Helper()
	w, err := worker.NewWorker(js, cfg, h)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("worker Run: %v", err)
				}
			case <-time.After(cfg.GracePeriod + 15*time.Second):
				tb.Errorf("worker did not stop")
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}
