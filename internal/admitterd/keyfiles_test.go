package admitterd_test

import (
	"context"
	"fmt"
	"log/slog"
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

const (
	keyA = "key-a-0123456789abcdef"
	keyB = "key-b-0123456789abcdef"
	keyC = "key-c-0123456789abcdef"
)

// keyedAdmitter starts an admitter whose API keys are read from a file
// holding keys, with o's KeyFileInterval, and returns it, its key file, the
// Watcher on its configuration, and its logs and metrics.
func keyedAdmitter(t *testing.T, interval time.Duration, keys ...string) (*admitterd.Service, string, *cli.Watcher, *logtest.Buffer, *prometheus.Registry) {
	t.Helper()
	srv := queuetest.Start(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "api-keys")
	writeKeys(t, keyFile, keys...)
	path := filepath.Join(dir, "spillway.yaml")
	yaml := fmt.Sprintf(`
nats: {url: %q}
http: {listen: "127.0.0.1:0", api_keys_file: %q}
queues:
  - name: q
    limits: [{key: global, rate: 1000/s, burst: 1000}]
    backlog: {leak_rate: 1/s}
`, srv.URL(), keyFile)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := cli.NewWatcher(path, nil, config.Overrides{}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	reg := prometheus.NewRegistry()
	s := startWith(t, admitterd.Options{Config: w.Current(), Registry: reg, KeyFileInterval: interval,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	return s, keyFile, w, logs, reg
}

func writeKeys(t *testing.T, path string, keys ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("# producers\n"+strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// post submits a job with key and returns the status code.
func post(t *testing.T, s *admitterd.Service, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.HTTPAddr()+"/v1/queues/q/jobs", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// within waits up to d, from since, for key's submissions to be answered
// code.
func within(t *testing.T, s *admitterd.Service, since time.Time, d time.Duration, key string, code int, what string) {
	t.Helper()
	for {
		got := post(t, s, key)
		if got == code {
			return
		}
		if time.Since(since) > d {
			t.Fatalf("%s: after %v a submission with the key is still answered %d, want %d", what, d, got, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A key removed from http.api_keys_file is refused within a second, with
// no signal and no restart; a key added is accepted; a file that turns
// invalid keeps the running keys, logged and counted; the logs name no key.
func TestKeyFileFollowedWithoutSignal(t *testing.T) {
	t.Parallel()
	s, keyFile, _, logs, reg := keyedAdmitter(t, 0, keyA, keyB)
	if code := post(t, s, keyA); code != http.StatusAccepted {
		t.Fatalf("key A at start: %d, want 202", code)
	}

	removed := time.Now()
	writeKeys(t, keyFile, keyB)
	within(t, s, removed, time.Second, keyA, http.StatusUnauthorized, "key A removed from the file")
	if code := post(t, s, keyB); code != http.StatusAccepted {
		t.Errorf("key B, kept: %d, want 202", code)
	}

	added := time.Now()
	writeKeys(t, keyFile, keyB, keyC)
	within(t, s, added, time.Second, keyC, http.StatusAccepted, "key C added to the file")

	writeKeys(t, keyFile, keyB, "short") // a key of 5 characters: the file is refused
	const failures = `spillway_api_keys_reloads_total{result=failure,setting=http.api_keys_file}`
	for deadline := time.Now().Add(5 * time.Second); gauges(t, reg)[failures] != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s %s = %v, want 1", failures, gauges(t, reg)[failures])
		}
	}
	for _, key := range []string{keyB, keyC} {
		if code := post(t, s, key); code != http.StatusAccepted {
			t.Errorf("after an invalid key file: a running key answered %d, want 202", code)
		}
	}
	if got := gauges(t, reg)[`spillway_api_keys_reloads_total{result=success,setting=http.api_keys_file}`]; got != 2 {
		t.Errorf("successful key file reloads: %v, want 2", got)
	}
	log := logs.String()
	for _, want := range []string{"key file reloaded", "keys=1", "keys=2", "key file reload failed; the running keys stay", "removed=[sha256:"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	for _, key := range []string{keyA, keyB, keyC} {
		if strings.Contains(log, key) {
			t.Errorf("the log shows a key:\n%s", log)
		}
	}
}

// SIGHUP reads the key files again: main hands it to a cli.Reloader whose
// OnRequest is Service.ReloadKeys. Here the files are not looked at on
// their own (an hour's interval), so the request alone removes key A and
// adds key C.
func TestKeyFileReloadedOnSIGHUP(t *testing.T) {
	t.Parallel()
	s, keyFile, w, _, _ := keyedAdmitter(t, time.Hour, keyA, keyB)
	reloaded := make(chan error, 1)
	w.OnReload = func(_, next *config.Config) { // as cmd/admitter wires it
		reloaded <- s.Reload(context.WithoutCancel(t.Context()), next)
	}
	sighup := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	r := &cli.Reloader{Watcher: w, Requests: sighup, OnRequest: s.ReloadKeys, Logger: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	writeKeys(t, keyFile, keyB, keyC)
	if code := post(t, s, keyA); code != http.StatusAccepted {
		t.Fatalf("key A before SIGHUP: %d, want 202 (the file is not looked at on its own)", code)
	}
	sent := time.Now()
	sighup <- struct{}{}
	within(t, s, sent, time.Second, keyA, http.StatusUnauthorized, "key A removed, then SIGHUP")
	within(t, s, sent, time.Second, keyC, http.StatusAccepted, "key C added, then SIGHUP")
	if err := <-reloaded; err != nil {
		t.Errorf("the configuration's reload on SIGHUP: %v", err)
	}
}

// An admitter listening beyond loopback without API keys warns at start,
// saying who can do what and how to close it; on loopback it does not.
func TestOpenListenWarning(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	for _, tt := range []struct {
		listen string
		warn   bool
	}{
		{"0.0.0.0:0", true},
		{"127.0.0.1:0", false},
	} {
		cfg, err := config.LoadBytes("spillway.yaml", fmt.Appendf(nil, `
nats: {url: %q}
http: {listen: %q}
queues:
  - name: q
    limits: [{key: global, rate: 1/s}]
    backlog: {leak_rate: 1/s}
`, srv.URL(), tt.listen), func(string) string { return "" }, config.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		logs := &logtest.Buffer{}
		startWith(t, admitterd.Options{Config: cfg, Registry: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		warned := strings.Contains(logs.String(), "level=WARN") &&
			strings.Contains(logs.String(), "anyone who can reach") && strings.Contains(logs.String(), "http.api_keys_file")
		if warned != tt.warn {
			t.Errorf("listen %s without API keys: warned %v, want %v; log:\n%s", tt.listen, warned, tt.warn, logs.String())
		}
	}
}
