package workerd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// TestMeasureAdaptiveLeakHTTP measures the whole worker — config, HTTP
// handler, pacer in JetStream — against a webhook that answers 429
// (Retry-After: 1) to every request beyond 30 in the last second: two
// worker pools, leak_rate {max: 100/s, adaptive: true}, 40 s. It logs the
// requests per second, the share of 429s and the busiest 1 s window. It
// takes 40 s, so it runs only with SPILLWAY_MEASURE_PUSHBACK=1.
func TestMeasureAdaptiveLeakHTTP(t *testing.T) {
	if os.Getenv("SPILLWAY_MEASURE_PUSHBACK") == "" {
		t.Skip("a 40 s measurement; set SPILLWAY_MEASURE_PUSHBACK=1 to run it")
	}
	const limit, run = 30, 40 * time.Second
	var (
		mu       sync.Mutex
		calls    []time.Time
		rejected int
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		mu.Lock()
		calls = append(calls, now)
		i := sort.Search(len(calls), func(i int) bool { return calls[i].After(now.Add(-time.Second)) })
		over := len(calls)-i > limit
		if over {
			rejected++
		}
		mu.Unlock()
		if over {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)

	srv := queuetest.Start(t)
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	yaml := fmt.Sprintf(`
nats: {url: %q}
worker: {concurrency: 8}
queues:
  - name: hook
    limits: [{key: global, rate: 1/s}]
    backlog: {capacity: 10000, leak_rate: {max: 100/s, adaptive: true}}
    handler: {http: {url: %q}}
`, srv.URL(), hook.URL)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	js := srv.JetStream(t)
	if err := queue.EnsureStreams(t.Context(), js, cfg.Queues[0].Backlog); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		id, err := queue.NewJobID("hook")
		if err != nil {
			t.Fatal(err)
		}
		j := &queue.Job{ID: id, Queue: "hook", Key: fmt.Sprintf("k%03d", i%200), Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}
		if _, err := pub.Publish(t.Context(), queue.Backlog, j); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var pools []chan error
	began := time.Now()
	for range 2 {
		pool, err := workerd.Start(ctx, workerd.Options{NC: srv.Connect(t), JS: srv.JetStream(t), Config: cfg, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- pool.Wait() }()
		pools = append(pools, done)
	}
	t.Cleanup(func() {
		cancel()
		for _, done := range pools {
			if err := <-done; err != nil {
				t.Errorf("Wait: %v", err)
			}
		}
	})
	time.Sleep(run)
	end := began.Add(run)
	mu.Lock()
	defer mu.Unlock()
	perSecond := make([]int, int(run/time.Second))
	in := calls[:sort.Search(len(calls), func(i int) bool { return calls[i].After(end) })]
	for _, c := range in {
		if s := int(c.Sub(began) / time.Second); s >= 0 && s < len(perSecond) {
			perSecond[s]++
		}
	}
	busiest := func(from time.Time) int {
		most, j := 0, 0
		for i := range in {
			for j < i && (in[j].Before(in[i].Add(-time.Second)) || in[j].Before(from)) {
				j++
			}
			if !in[i].Before(from) {
				most = max(most, i-j+1)
			}
		}
		return most
	}
	last := len(in) - sort.Search(len(in), func(i int) bool { return in[i].After(end.Add(-20 * time.Second)) })
	t.Logf("requests per second: %v", perSecond)
	t.Logf("requests %d, 429s %d (%.1f%% of all requests so far)", len(in), rejected, 100*float64(rejected)/float64(max(len(calls), 1)))
	t.Logf("last 20 s: %.1f requests/s; busiest 1 s window: %d over the run, %d in the last 20 s",
		float64(last)/20, busiest(began), busiest(end.Add(-20*time.Second)))
}
