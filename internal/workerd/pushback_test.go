package workerd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// A worker of an adaptive queue whose handler is pushed back pauses the
// leak and cuts it: spillway_leak_pauses_total counts the pause,
// spillway_leak_rate_current shows the cut rate (7/10 of 50/s), and a
// reload that turns adaptive off brings the maximum back in place.
func TestPushbackMetrics(t *testing.T) {
	srv := queuetest.Start(t)
	nc := srv.Connect(t)
	js := srv.JetStream(t)
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	load := func(adaptive bool) *config.Config {
		t.Helper()
		yaml := fmt.Sprintf(`
nats: {url: %q}
queues:
  - name: pb
    limits: [{key: global, rate: 10/s}]
    backlog: {leak_rate: {max: 50/s, adaptive: %v}}
    handler: {log: true}
`, srv.URL(), adaptive)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	reg := prometheus.NewRegistry()
	h := func(ctx context.Context, j *queue.Job) error {
		return retry.Permanent(retry.Pushback(errors.New("429 Too Many Requests"), 0))
	}
	ctx, cancel := context.WithCancel(t.Context())
	pool, err := workerd.Start(ctx, workerd.Options{
		NC: nc, JS: js, Config: load(true), Handlers: map[string]worker.Handler{"pb": h},
		Registerer: reg, Logger: slog.New(slog.DiscardHandler),
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
	value := func(name string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "pb" {
					if m.GetGauge() != nil {
						return m.GetGauge().GetValue(), true
					}
					return m.GetCounter().GetValue(), true
				}
			}
		}
		return 0, false
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 20s: still waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if v, ok := value("spillway_leak_rate_current"); !ok || v != 50 {
		t.Errorf("before any pushback: spillway_leak_rate_current %v (exported %v), want 50", v, ok)
	}

	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := queue.NewJobID("pb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(t.Context(), queue.Backlog, &queue.Job{ID: id, Queue: "pb", Key: "k", Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor("a pause counted", func() bool { v, _ := value("spillway_leak_pauses_total"); return v == 1 })
	if v, _ := value("spillway_leak_rate_current"); v < 35 || v >= 50 {
		t.Errorf("after a pushback: spillway_leak_rate_current %v, want from 35 (the cut) to below 50 (climbing)", v)
	}
	if err := pool.Reload(load(false)); err != nil {
		t.Fatal(err)
	}
	if v, _ := value("spillway_leak_rate_current"); v != 50 {
		t.Errorf("adaptive turned off: spillway_leak_rate_current %v, want 50", v)
	}
}
