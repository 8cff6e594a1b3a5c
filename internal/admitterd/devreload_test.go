package admitterd_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// In dev mode the admitter's reload reaches its in-process workers: a leak
// rate raised from 4/s to 20/s under a deep backlog is followed at once.
func TestDevReloadReachesWorkers(t *testing.T) {
	dir := t.TempDir()
	load := func(leak string) *config.Config {
		t.Helper()
		path := filepath.Join(dir, "spillway.yaml")
		yaml := fmt.Sprintf(`
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: d
    limits: [{key: global, algorithm: leaky_bucket, rate: 10/s, burst: 10}]
    backlog: {capacity: 1000, leak_rate: %s}
    handler: {log: true}
`, filepath.Join(dir, "js"), leak)
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
		mu     sync.Mutex
		starts []time.Time
	)
	count := func(from, to time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range starts {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
		return n
	}
	cfg := load("4/s")
	s, err := admitterd.Start(t.Context(), admitterd.Options{
		Config: cfg, Dev: true, Logger: slog.New(slog.DiscardHandler),
		Handlers: map[string]worker.Handler{"d": func(context.Context, *queue.Job) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		id, err := queue.NewJobID("d")
		if err != nil {
			t.Fatal(err)
		}
		j := &queue.Job{ID: id, Queue: "d", Key: fmt.Sprint("k", i%5), Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}
		if _, err := pub.Publish(t.Context(), queue.Backlog, j); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	slow := count(t0.Add(time.Second), t0.Add(3*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := s.Reload(ctx, load("20/s")); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	time.Sleep(3 * time.Second)
	fast := count(raised.Add(time.Second), raised.Add(3*time.Second))
	t.Logf("leak 4/s: %d starts in 2 s; after the reload to 20/s: %d starts in 2 s", slow, fast)
	// Above the leak only by a window's slack. Below it: with the machine
	// to itself by that slack too; in the default run by what a loaded
	// machine loses as well (a starved drain leaks slower, never faster).
	// Workers that did not follow the reload would start about 8 in the
	// second window.
	slowFloor, fastFloor := 4, 24
	if buckettest.ReliabilityFull() {
		slowFloor, fastFloor = 6, 36
	}
	if slow < slowFloor || slow > 10 {
		t.Errorf("at 4/s: %d starts in 2 s, want about 8", slow)
	}
	if fast < fastFloor || fast > 42 {
		t.Errorf("after the reload to 20/s: %d starts in 2 s, want about 40: the in-process workers did not follow", fast)
	}
}
