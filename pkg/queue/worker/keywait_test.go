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
