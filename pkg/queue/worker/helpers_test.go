package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
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

// publishAll publishes jobs concurrently and counts the outcomes.
func publishAll(ctx context.Context, b *bundle, d queue.Destination, jobs []*queue.Job) (ok, full, keyFull int, other []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			_, err := b.pub.Publish(ctx, d, j)
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
