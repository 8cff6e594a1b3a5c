package workerd_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A reload that changes a queue's worker settings (here its concurrency)
// replaces its worker.Worker while jobs run and backlog jobs are held: the
// old worker's running jobs finish (their context is never canceled), the
// backlog jobs it held go to the new one, the new concurrency applies, and
// every job runs exactly once.
func TestReloadReplacesWorkerWithoutLosingJobs(t *testing.T) {
	srv := queuetest.Start(t)
	nc := srv.Connect(t)
	js := srv.JetStream(t)
	dir := t.TempDir()
	load := func(concurrency int) *config.Config {
		t.Helper()
		path := filepath.Join(dir, "spillway.yaml")
		yaml := fmt.Sprintf(`
nats: {url: %q}
worker: {concurrency: %d, grace_period: 20s}
queues:
  - name: w
    limits: [{key: global, algorithm: leaky_bucket, rate: 10/s, burst: 10}]
    backlog: {capacity: 1000, leak_rate: 20/s}
    handler: {log: true}
`, srv.URL(), concurrency)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	var (
		mu        sync.Mutex
		runs      = map[string]int{}
		running   int
		peak      int
		canceled  int
		peakAfter int
		reloaded  bool
	)
	h := func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		runs[j.ID]++
		running++
		if reloaded {
			peakAfter = max(peakAfter, running)
		} else {
			peak = max(peak, running)
		}
		mu.Unlock()
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
		mu.Lock()
		running--
		if ctx.Err() != nil {
			canceled++
		}
		mu.Unlock()
		return nil
	}
	cfg := load(2)
	ctx, cancel := context.WithCancel(t.Context())
	pool, err := workerd.Start(ctx, workerd.Options{
		NC: nc, JS: js, Config: cfg, Handlers: map[string]worker.Handler{"w": h}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Wait() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Wait: %v", err)
		}
	})

	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 160 {
		id, err := queue.NewJobID("w")
		if err != nil {
			t.Fatal(err)
		}
		d := queue.Ready
		if i%2 == 1 {
			d = queue.Backlog // at 20/s: held by the worker when it is replaced
		}
		j := &queue.Job{ID: id, Queue: "w", Key: fmt.Sprint("k", i%4), Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}
		if _, err := pub.Publish(t.Context(), d, j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs)
	}
	deadline := time.Now().Add(20 * time.Second)
	for count() < 20 {
		if time.Now().After(deadline) {
			t.Fatal("no 20 jobs ran within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	reloaded = true
	mu.Unlock()
	if err := pool.Reload(load(8)); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for count() < len(ids) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s only %d of %d jobs ran", count(), len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything run twice would show now
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("job %s ran %d times, want once", id, runs[id])
		}
	}
	if canceled > 0 {
		t.Errorf("%d running jobs had their context canceled by the reload", canceled)
	}
	if peak > 2 || peakAfter <= 2 {
		// After it, up to 8 of the new worker's and, briefly, the 2 the
		// old one still finishes.
		t.Errorf("concurrency: at most %d at once before the reload (want ≤ 2), %d after (want > 2, up to 8 + 2)", peak, peakAfter)
	}
	t.Logf("%d jobs, once each; handlers at once: ≤ %d before the reload, %d after", len(ids), peak, peakAfter)

	// A configuration that cannot be applied changes nothing.
	bad := load(8)
	bad.Queues = nil
	if err := pool.Reload(bad); err == nil || !strings.Contains(err.Error(), "no queue has a handler") {
		t.Errorf("Reload of a config without queues: %v, want the no-handler error", err)
	}
}
