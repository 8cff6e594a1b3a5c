package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// keyCounter counts the handlers running per key and keeps each key's
// peak.
type keyCounter struct {
	mu      sync.Mutex
	running map[string]int
	peak    map[string]int
}

func (c *keyCounter) enter(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[key]++
	c.peak[key] = max(c.peak[key], c.running[key])
}

func (c *keyCounter) leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[key]--
}

// Two workers, jobs of a key with max 2 in READY and in the backlog:
// never more than 2 of them run at once across the workers, another
// key's jobs run beside them, every job runs exactly once and on its first
// try (waiting for a slot spends no try), and the slots' bucket is empty
// at the end.
func TestKeyConcurrencyAcrossWorkers(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("conc"))
	rec := newRecorder()
	kc := &keyCounter{running: map[string]int{}, peak: map[string]int{}}
	h := func(ctx context.Context, j *queue.Job) error {
		kc.enter(j.Key)
		defer kc.leave(j.Key)
		rec.started(j)
		if j.Attempt != 1 {
			t.Errorf("job %s of key %s: try %d, want 1", j.ID, j.Key, j.Attempt)
		}
		time.Sleep(30 * time.Millisecond)
		return nil
	}
	cfg := worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Observe: rec.observe, AckWait: 3 * time.Second}
	queuetest.RunWorker(t, b.JS, cfg, h)
	queuetest.RunWorker(t, b.JS, cfg, h)

	bound := func(key string, most int) []queue.ConcurrencyKey {
		return []queue.ConcurrencyKey{{Name: "per-key", Max: most, Token: queue.KeyToken(key)}}
	}
	var jobs []*queue.Job
	for i := range 30 {
		key, dest := "a", queue.Ready
		if i%3 == 2 {
			key = "b"
		}
		if i%2 == 1 {
			dest = queue.Backlog
		}
		j := queuetest.NewJob(t, "conc", key)
		j.Concurrency = bound(key, 2)
		if _, err := b.Pub.Publish(ctx, dest, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	rec.waitFor(t, 60*time.Second, "30 successes", func() bool { return rec.count(worker.Succeeded) == 30 })
	for _, j := range jobs {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("job %s ran %d times", j.ID, n)
		}
	}
	kc.mu.Lock()
	if kc.peak["a"] > 2 || kc.peak["b"] > 2 {
		t.Errorf("peaks %v: want at most 2 of a key at once", kc.peak)
	}
	kc.mu.Unlock()
	if rec.count(worker.KeyWaiting) == 0 {
		t.Errorf("no job waited for a key slot: the test did not reach the max")
	}
	kv, err := b.JS.KeyValue(ctx, keyslots.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 10*time.Second, "the slots' entries deleted", func() bool {
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return false
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return n == 0
	})
}

// A READY job waiting for its key's slot when its worker stops is handed
// back, not run and not lost: the next worker runs it, once. The job that
// held the slot finishes within the grace period.
func TestKeyWaiterHandedBackAtStop(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("concstop"))
	rec := newRecorder()
	release := make(chan struct{})
	first := make(chan string, 1)
	h := func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		select {
		case first <- j.ID:
			<-release // the first job holds the key's one slot until told
		default:
		}
		return nil
	}
	cfg := worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Observe: rec.observe, AckWait: 3 * time.Second, GracePeriod: 10 * time.Second}
	stop := queuetest.RunWorker(t, b.JS, cfg, h)
	var jobs []*queue.Job
	for range 2 {
		j := queuetest.NewJob(t, "concstop", "a")
		j.Concurrency = []queue.ConcurrencyKey{{Name: "one", Max: 1, Token: queue.KeyToken("a")}}
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	var running string
	select {
	case running = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("no job started")
	}
	rec.waitFor(t, 30*time.Second, "the other job waiting for the key's slot", func() bool { return rec.count(worker.KeyWaiting) == 1 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	rec.waitFor(t, 30*time.Second, "the waiting job handed back", func() bool { return rec.count(worker.KeyWaited) == 1 })
	close(release)
	<-stopped
	if n := rec.count(worker.Started); n != 1 {
		t.Fatalf("%d starts before the stop, want only the job that held the slot", n)
	}
	queuetest.RunWorker(t, b.JS, cfg, h)
	rec.waitFor(t, 30*time.Second, "both jobs succeeded", func() bool { return rec.count(worker.Succeeded) == 2 })
	for _, j := range jobs {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("job %s ran %d times (the first to run: %s), want once", j.ID, n, running)
		}
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("concstop", queue.Ready)); n != 0 {
		t.Errorf("%d jobs left in READY", n)
	}
}
