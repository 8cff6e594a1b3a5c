package admin_test

import (
	"context"
	"errors"
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

// recorder keeps a worker's events and the handler's calls, and lets a
// test wait for a condition on them without sleeping.
type recorder struct {
	mu      sync.Mutex
	events  []worker.Event
	starts  map[string][]time.Time // job id → handler calls
	order   []string               // job ids in the order handlers started
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{starts: map[string][]time.Time{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) observe(e worker.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) started(j *queue.Job) {
	r.mu.Lock()
	r.starts[j.ID] = append(r.starts[j.ID], time.Now())
	r.order = append(r.order, j.ID)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) count(kind worker.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// waitFor waits until cond holds, failing the test after d.
func (r *recorder) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond) // for conditions on JetStream's state
	defer poll.Stop()
	for !cond() {
		select {
		case <-r.changed:
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("after %v: still waiting for %s", d, what)
		}
	}
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

// fixedRand takes off the same jitter every time: Int64N(n) = n/2.
type fixedRand struct{}

// deadLetters reads every message of a queue's DEAD stream.
func deadLetters(t *testing.T, ctx context.Context, js jetstream.JetStream, q string) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(ctx, queue.StreamName(q, queue.Dead))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}
