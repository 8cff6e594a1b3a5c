package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A key paused before any worker of the queue ran — by a worker that has
// since died, the leader among them — is known to the workers that start
// after it: the new leader grants none of the key's jobs until the pause
// ends, the other key's jobs go meanwhile, and the paused key's jobs all
// run after it.
func TestKeyPauseOutlivesTheWorkerThatWroteIt(t *testing.T) {
	t.Parallel()
	const perKey, pause = 8, 2 * time.Second
	cfg := queuetest.QueueConfig("kpf") // 50/s
	cfg.Pushback = queue.PushbackKey
	ctx, b := queuetest.StartQueue(t, cfg)
	kv, err := pace.OpenKeyPushbackBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	until, err := pace.NewKeyPauses().Pause(ctx, kv, cfg.Name, queue.KeyToken("P"), pause)
	if err != nil {
		t.Fatal(err)
	}
	publishBacklog(t, ctx, b, "P", perKey, time.Time{})
	publishBacklog(t, ctx, b, "Q", perKey, time.Time{})
	var (
		mu     sync.Mutex
		starts = map[string][]time.Time{}
	)
	rec := newRecorder()
	handler := func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		starts[j.Key] = append(starts[j.Key], time.Now())
		mu.Unlock()
		return nil
	}
	shared, err := pace.OpenPacerBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		kp, err := pace.NewKVPacer(shared, cfg.Name, cfg.LeakRate)
		if err != nil {
			t.Fatal(err)
		}
		yp, err := pace.NewYieldingPacer(kp, shared, cfg.Name, cfg.LeakRate, false)
		if err != nil {
			t.Fatal(err)
		}
		queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Pacer: yp, Observe: rec.observe}, handler)
	}
	rec.waitFor(t, 30*time.Second, "every job done", func() bool { return rec.count(worker.Succeeded) == 2*perKey })
	mu.Lock()
	defer mu.Unlock()
	for _, s := range starts["P"] {
		if s.Before(until) {
			t.Errorf("a job of the paused key started %v before its pause's end", until.Sub(s).Round(time.Millisecond))
		}
	}
	for _, s := range starts["Q"] {
		if !s.Before(until) {
			t.Errorf("a job of the other key started %v after the pause's end, want every one during it (the leak is its alone)", s.Sub(until).Round(time.Millisecond))
		}
	}
	if len(starts["P"]) != perKey || len(starts["Q"]) != perKey {
		t.Errorf("starts: P %d, Q %d, want %d each, once", len(starts["P"]), len(starts["Q"]), perKey)
	}
}
