package admitterd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/cli"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/testkit/logtest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// startWith starts an admitter with o (Config and Registry required) and
// stops it when the test ends.
func startWith(t *testing.T, o admitterd.Options) *admitterd.Service {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := admitterd.Start(t.Context(), o)
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
	return s
}

// watch writes yaml to a file and returns a Watcher on it wired to s as
// cmd/admitter wires it, and a function that rewrites the file and
// reloads it (what SIGHUP does).
func watch(t *testing.T, yaml string) (*cli.Watcher, func(s *admitterd.Service, yaml string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := cli.NewWatcher(path, nil, config.Overrides{}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w, func(s *admitterd.Service, yaml string) {
		t.Helper()
		w.OnReload = func(_, next *config.Config) {
			if err := s.Reload(t.Context(), next); err != nil {
				t.Errorf("Reload: %v", err)
			}
		}
		w.OnResult = func(ok bool, _ error) {
			if !ok {
				s.ReloadFailed()
			}
		}
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := w.Reload(); err != nil {
			t.Fatalf("reloading:\n%s\n%v", yaml, err)
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestIPTierWarning: an admitter whose queue has an ip tier warns, at
// start and at a reload that brings one, naming the queue and the tier:
// its NATS door cannot key such submissions.
func TestIPTierWarning(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	const yaml = `
nats: {url: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: byip
    limits:
      - {key: "header:X-Client", rate: 1/s}
      - {key: ip, rate: 1/s, name: per-ip}
    backlog: {leak_rate: 1/s}
  - name: plain
    limits: [{key: global, rate: 1/s}]
    backlog: {leak_rate: 1/s}
%s`
	w, reload := watch(t, fmt.Sprintf(yaml, srv.URL(), ""))
	var logs logtest.Buffer
	s := startWith(t, admitterd.Options{Config: w.Current(), Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	warnings := func(q string) int {
		n := 0
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "queue="+q+" ") && strings.Contains(line, "NATS door") {
				n++
			}
		}
		return n
	}
	if warnings("byip") != 1 || !strings.Contains(logs.String(), "tier=per-ip") || warnings("plain") != 0 {
		t.Errorf("log at start:\n%s\nwant one warning naming queue byip and tier per-ip, none for plain", logs.String())
	}
	reload(s, fmt.Sprintf(yaml, srv.URL(), `  - name: added
    limits: [{key: ip, rate: 1/s}]
    backlog: {leak_rate: 1/s}
`))
	if warnings("added") != 1 || !strings.Contains(logs.String(), "queue=added tier=tier0") {
		t.Errorf("log after a reload adding queue added:\n%s\nwant a warning naming queue added and tier tier0", logs.String())
	}
}

// TestReadyFollowsReloadedFailureMode: a reload that changes
// redis.failure_mode changes what decisions do while the store is down
// and what /readyz says about it.
func TestReadyFollowsReloadedFailureMode(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens here: Redis is down
	_ = ln.Close()
	const yaml = `
nats: {url: %q}
redis: {url: "redis://%s/0", failure_mode: %s}
http: {listen: "127.0.0.1:0"}
queues:
  - name: q
    limits: [{key: "header:X-Client", rate: 1/m, burst: 5}]
    backlog: {capacity: 10, leak_rate: 1/m}
`
	w, reload := watch(t, fmt.Sprintf(yaml, srv.URL(), closed, "open"))
	reg := prometheus.NewRegistry()
	s := startWith(t, admitterd.Options{Config: w.Current(), Registry: reg})
	ready := func() int {
		code, _ := httpGet(t, "http://"+s.HTTPAddr()+"/readyz")
		return code
	}
	if v, ok := gauges(t, reg)["spillway_store_errors_total{store=redis}"]; !ok || v != 0 {
		t.Errorf("spillway_store_errors_total{store=redis} = %v (exported: %v) before any decision, want 0", v, ok)
	}
	if codes := submit(t, s, "q", "a", 1); codes[0] != http.StatusAccepted {
		t.Fatalf("open, Redis down: %v, want 202", codes)
	}
	if code := ready(); code != http.StatusOK {
		t.Errorf("/readyz with failure_mode open and Redis down: %d, want 200", code)
	}

	reload(s, fmt.Sprintf(yaml, srv.URL(), closed, "closed"))
	if codes := submit(t, s, "q", "a", 1); codes[0] != http.StatusServiceUnavailable {
		t.Errorf("after the reload to closed, Redis down: %v, want 503", codes)
	}
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the reload to failure_mode closed, Redis down: %d, want 503", code)
	}
	if got := gauges(t, reg)["spillway_failure_mode_active{mode=closed}"]; got != 1 {
		t.Errorf("spillway_failure_mode_active{mode=closed} = %v after the reload, want 1", got)
	}

	reload(s, fmt.Sprintf(yaml, srv.URL(), closed, "local"))
	if code := ready(); code != http.StatusOK {
		t.Errorf("/readyz after the reload to failure_mode local: %d, want 200", code)
	}
	if codes := submit(t, s, "q", "a", 1); codes[0] != http.StatusAccepted {
		t.Errorf("after the reload to local, Redis down: %v, want 202 from the local store", codes)
	}
	if got := gauges(t, reg)["spillway_failure_mode_total{mode=local}"]; got != 1 {
		t.Errorf("spillway_failure_mode_total{mode=local} = %v, want 1", got)
	}
}

// TestCountersStartAtZero: after a burst through dev mode, every counter
// whose labels are known in advance has its series, at 0 where nothing
// happened, so rate() and the alerts see 0 rather than nothing; a reload
// that adds a queue adds its series.
func TestCountersStartAtZero(t *testing.T) {
	t.Parallel()
	const yaml = `
nats: {listen: "127.0.0.1:0"}
http: {listen: "127.0.0.1:0"}
queues:
  - name: demo
    limits: [{key: "header:X-Client", rate: 100/s, burst: 20, delay: 5}]
    backlog: {capacity: 100, leak_rate: 100/s}
    handler: {log: true}
%s`
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(yaml, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s := startWith(t, admitterd.Options{Config: cfg, Dev: true, Registry: prometheus.NewRegistry()})
	if codes := submit(t, s, "demo", "a", 10); codes[0] != http.StatusAccepted {
		t.Fatalf("burst: %v", codes)
	}
	scrape := func() string {
		code, body := httpGet(t, "http://"+s.HTTPAddr()+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		return body
	}
	want := func(when, body string, series ...string) {
		t.Helper()
		for _, sr := range series {
			if !strings.Contains(body, "\n"+sr+" 0\n") {
				t.Errorf("%s: no series %s at 0", when, sr)
			}
		}
	}
	body := scrape()
	want("after a burst", body,
		`spillway_dead_letters_total{queue="demo"}`,
		`spillway_jobs_completed_total{queue="demo",result="dead"}`,
		`spillway_jobs_completed_total{queue="demo",result="retrying"}`,
		`spillway_store_errors_total{store="memory"}`,
		`spillway_failure_mode_total{mode="open"}`,
		`spillway_failure_mode_total{mode="closed"}`,
		`spillway_failure_mode_total{mode="local"}`,
		`spillway_decisions_total{queue="demo",reason="limit",verdict="rejected"}`,
		`spillway_decisions_total{queue="demo",reason="backlog_full",verdict="rejected"}`,
		`spillway_decisions_total{queue="demo",reason="idempotency",verdict="duplicate"}`,
		`spillway_decisions_total{queue="demo",reason="unavailable",verdict="error"}`,
		`spillway_decisions_total{queue="demo",reason="internal",verdict="error"}`,
		`spillway_config_reloads_total{result="failure"}`,
	)

	// A reload adding a queue: its admitter series start at 0 (dev-mode
	// workers do not reload, so no worker series for it).
	w, err := cli.NewWatcher(path, nil, config.Overrides{}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.OnReload = func(_, next *config.Config) {
		if err := s.Reload(t.Context(), next); err != nil {
			t.Errorf("Reload: %v", err)
		}
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf(yaml, `  - name: added
    limits: [{key: global, rate: 1/s}]
    backlog: {leak_rate: 1/s}
`)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	body = scrape()
	want("after a reload adding queue added", body,
		`spillway_decisions_total{queue="added",reason="limit",verdict="admitted"}`,
		`spillway_decisions_total{queue="added",reason="limit",verdict="rejected"}`,
		`spillway_decisions_total{queue="added",reason="unavailable",verdict="error"}`,
		`spillway_decision_duration_seconds_count{queue="added"}`,
	)
}
