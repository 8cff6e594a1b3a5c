package admitterd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func start(t *testing.T, cfg *config.Config) (*admitterd.Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := admitterd.Start(t.Context(), admitterd.Options{Config: cfg, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
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
	return s, reg
}

// submit posts n jobs for one client and returns the status codes.
func submit(t *testing.T, s *admitterd.Service, q, client string, n int) []int {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	var codes []int
	for range n {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.HTTPAddr()+"/v1/queues/"+q+"/jobs", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Client", client)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// gauges gathers reg and returns every gauge and counter value by
// "name{label=value,...}".
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestQueueMetricsReadJetStream: the queue gauges an admitter exports are
// the queue's state in JetStream at scrape time, promlint-clean, and a
// queue whose streams cannot be read is counted and left out instead of
// reported as empty.
func TestQueueMetricsReadJetStream(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	cfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {url: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 5}]
    backlog: {capacity: 10, per_key_capacity: 8, leak_rate: 1/m}
`, srv.URL()))
	s, reg := start(t, cfg)

	// No workers run: 1 admitted and 5 queued stay where they are.
	codes := submit(t, s, "q", "a", 8)
	if want := []int{202, 202, 202, 202, 202, 202, 429, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", codes, want)
	}
	got := gauges(t, reg)
	for name, want := range map[string]float64{
		"spillway_queue_depth":                   5,
		"spillway_queue_capacity":                10,
		"spillway_queue_per_key_capacity":        8,
		"spillway_queue_fill_ratio":              0.5,
		"spillway_queue_estimated_drain_seconds": 300, // 5 jobs at 1/min
		"spillway_queue_ready":                   1,
		"spillway_queue_dead":                    0,
		"spillway_queue_ack_pending":             0,
		"spillway_queue_max_ack_pending":         0, // no worker has made the consumer yet
		"spillway_queue_backlog_pullers":         0,
		"spillway_queue_backlog_held":            0,
		"spillway_queue_ready_capacity":          queue.DefaultReadyCapacity,
		"spillway_queue_paused":                  0,
	} {
		if v, ok := got[name+"{queue=q}"]; !ok || v != want {
			t.Errorf("%s{queue=q} = %v (exported: %v), want %v", name, v, ok, want)
		}
	}
	if age := got["spillway_queue_oldest_age_seconds{queue=q}"]; age <= 0 || age > 60 {
		t.Errorf("spillway_queue_oldest_age_seconds = %v, want the few seconds the first queued job has waited", age)
	}
	for _, key := range []string{"spillway_queue_inspect_errors_total{queue=q}", "spillway_config_reloads_total{result=success}", "spillway_config_reloads_total{result=failure}"} {
		if v, ok := got[key]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0 from the start, so that a rule sees the first increase", key, v, ok)
		}
	}
	if v := got["spillway_failure_mode_active{mode=open}"]; v != 0 {
		t.Errorf("spillway_failure_mode_active{mode=open} = %v without a shared store, want 0", v)
	}
	// Paused (docs/design.md#pause): the gauge says so once the shared
	// snapshot of the queues is refreshed, a second or two later at most.
	if err := pace.SetPause(t.Context(), srv.JetStream(t), "q", 0, pace.PauseState{Paused: true, At: time.Now(), By: "test"}); err != nil {
		t.Fatal(err)
	}
	scrapeUntil(t, reg, "spillway_queue_paused{queue=q} = 1 after a pause", func(g map[string]float64) bool {
		return g["spillway_queue_paused{queue=q}"] == 1
	})
	// The gauges agree with what the API reports (admin.Inspect).
	info, err := admin.Inspect(t.Context(), srv.JetStream(t), cfg.Queues[0].Backlog)
	if err != nil {
		t.Fatal(err)
	}
	if info.Backlog != 5 || info.Ready != 1 {
		t.Errorf("Inspect: backlog %d ready %d, want 5 and 1", info.Backlog, info.Ready)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// A stream gone (deleted by hand, say): the scrape leaves the queue
	// out and counts the error; nothing reads as an empty queue.
	if err := srv.JetStream(t).DeleteStream(t.Context(), queue.StreamName("q", queue.Backlog)); err != nil {
		t.Fatal(err)
	}
	got = scrapeUntil(t, reg, "no spillway_queue_depth{queue=q} for a queue whose backlog stream is gone", func(g map[string]float64) bool {
		_, ok := g["spillway_queue_depth{queue=q}"]
		return !ok
	})
	if v := got["spillway_queue_inspect_errors_total{queue=q}"]; v < 1 {
		t.Errorf("spillway_queue_inspect_errors_total{queue=q} = %v, want at least 1", v)
	}
}

// scrapeUntil scrapes reg until ok holds of its gauges, for up to 10s.
func scrapeUntil(t *testing.T, reg *prometheus.Registry, what string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := gauges(t, reg)
		if ok(g) {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s; last scrape %v", what, g)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFailureModeActive: the gauge is 1 for the configured mode while
// Redis is unreachable, and decisions are counted under that mode.
func TestFailureModeActive(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	cfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {url: %q}
redis: {url: "redis://%s/0", failure_mode: local}
http: {listen: "127.0.0.1:0"}
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 5}]
    backlog: {capacity: 10, leak_rate: 1/m}
`, srv.URL(), closed))
	s, reg := start(t, cfg)
	if before := gauges(t, reg)["spillway_failure_mode_active{mode=local}"]; before != 0 {
		t.Errorf("spillway_failure_mode_active{mode=local} = %v before any decision failed, want 0", before)
	}
	if codes := submit(t, s, "q", "a", 2); codes[0] != 202 || codes[1] != 202 {
		t.Fatalf("answers %v with the local failure mode, want 202 202", codes)
	}
	got := gauges(t, reg)
	for key, want := range map[string]float64{
		"spillway_failure_mode_active{mode=local}": 1,
		"spillway_failure_mode_total{mode=local}":  2,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if got["spillway_store_errors_total{store=redis}"] < 1 {
		t.Errorf("spillway_store_errors_total{store=redis} = %v, want ≥ 1", got["spillway_store_errors_total{store=redis}"])
	}
}
