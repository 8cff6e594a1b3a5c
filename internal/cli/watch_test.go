package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/testkit/logtest"
)

// watchBundle is what a Watcher test looks at.
type watchBundle struct {
	path    string
	results chan result // every OnResult
	reloads chan [2]*config.Config
	logs    *logtest.Buffer
}

type result struct {
	ok  bool
	err error
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// queueFile is a valid file whose one queue has the given name.
func queueFile(name string) string {
	return `queues:
  - name: ` + name + `
    limits: [{key: global, rate: 1/s}]
    backlog: {leak_rate: 1/s}
`
}

func setupWatcher(t *testing.T, interval time.Duration) (*Watcher, *watchBundle) {
	t.Helper()
	b := &watchBundle{
		path:    filepath.Join(t.TempDir(), "spillway.yaml"),
		results: make(chan result, 100),
		reloads: make(chan [2]*config.Config, 100),
		logs:    &logtest.Buffer{},
	}
	writeFile(t, b.path, queueFile("first"))
	w, err := NewWatcher(b.path, func(name string) string { return map[string]string{"SPILLWAY_HTTP_LISTEN": ":7"}[name] }, config.Overrides{}, interval,
		slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.OnResult = func(ok bool, err error) { b.results <- result{ok, err} }
	w.OnReload = func(old, new *config.Config) { b.reloads <- [2]*config.Config{old, new} }
	return w, b
}

// writeFile replaces the file the way editors do: write a new file, rename
// it over the old one.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func queueName(c *config.Config) string { return c.Queues[0].Name }

// expectOK waits for the next OnResult and checks that it is a success.
func (b *watchBundle) expectOK(t *testing.T) {
	t.Helper()
	if err := b.next(t); err != nil {
		t.Fatalf("OnResult(false, %v), want a success", err)
	}
}

// expectFailure waits for the next OnResult, checks that it is a failure
// and returns its error.
func (b *watchBundle) expectFailure(t *testing.T) error {
	t.Helper()
	err := b.next(t)
	if err == nil {
		t.Fatal("OnResult(true, nil), want a failure")
	}
	return err
}

// next waits for the next OnResult and returns its error (nil for ok).
func (b *watchBundle) next(t *testing.T) error {
	t.Helper()
	select {
	case r := <-b.results:
		if r.ok != (r.err == nil) {
			t.Fatalf("OnResult(%v, %v): ok and err disagree", r.ok, r.err)
		}
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("no OnResult within 10s")
	}
	return nil
}

func (b *watchBundle) expectNoResult(t *testing.T) {
	t.Helper()
	select {
	case r := <-b.results:
		t.Fatalf("OnResult(%v, %v), want none", r.ok, r.err)
	default:
	}
}

// TestWatcherPoll drives the file through its life, one look (poll) at a
// time: a valid change is applied, an invalid one and a removal are kept
// and reported once, and a valid file afterwards is applied again.
func TestWatcherPoll(t *testing.T) {
	t.Parallel()
	w, b := setupWatcher(t, time.Hour)
	first := w.Current()
	if queueName(first) != "first" || first.HTTP.Listen != ":7" {
		t.Fatalf("Current() = %+v", first)
	}

	w.poll() // nothing changed
	b.expectNoResult(t)
	if w.Current() != first {
		t.Fatal("a look at an unchanged file replaced the config")
	}

	writeFile(t, b.path, queueFile("second"))
	w.poll()
	b.expectOK(t)
	if r := <-b.reloads; r[0] != first || queueName(r[1]) != "second" || r[1] != w.Current() {
		t.Fatalf("OnReload(%v, %v)", r[0], r[1])
	}
	if w.Current().HTTP.Listen != ":7" {
		t.Error("the environment was not applied on reload")
	}
	second := w.Current()

	writeFile(t, b.path, queueFile("second")) // the same contents, a new file
	w.poll()
	b.expectNoResult(t)

	writeFile(t, b.path, strings.Replace(queueFile("third"), "1/s}]", "ten}]", 1))
	w.poll()
	err := b.expectFailure(t)
	if w.Current() != second {
		t.Fatal("an invalid file replaced the config")
	}
	want := b.path + `:3: queues[0].limits[0].rate: expected a rate such as "10/s", got "ten"`
	if err == nil || err.Error() != want {
		t.Errorf("OnResult error = %v, want %s", err, want)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "config reload failed") || !strings.Contains(logs, `got \"ten\"`) {
		t.Errorf("the failure is not logged with its problems:\n%s", logs)
	}
	w.poll() // still invalid: reported once
	b.expectNoResult(t)

	if err := os.Remove(b.path); err != nil {
		t.Fatal(err)
	}
	w.poll()
	if err := b.expectFailure(t); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OnResult error = %v, want not-exist", err)
	}
	w.poll() // still missing: reported once
	b.expectNoResult(t)
	if w.Current() != second {
		t.Fatal("a missing file replaced the config")
	}

	writeFile(t, b.path, queueFile("second")) // back, as it was before
	w.poll()
	b.expectOK(t)
	if queueName(w.Current()) != "second" {
		t.Errorf("Current() = %q", queueName(w.Current()))
	}
}

// TestWatcherSameSizeRewrite checks that a rewrite in place that keeps the
// size (and perhaps, on a coarse clock, the modification time) is seen.
func TestWatcherSameSizeRewrite(t *testing.T) {
	t.Parallel()
	w, b := setupWatcher(t, time.Hour)
	if err := os.WriteFile(b.path, []byte(queueFile("fresh")), 0o600); err != nil { // "first" and "fresh": same size
		t.Fatal(err)
	}
	w.poll()
	b.expectOK(t)
	if queueName(w.Current()) != "fresh" {
		t.Errorf("Current() = %q", queueName(w.Current()))
	}
}

// TestWatcherReload checks Reload, as on SIGHUP: it reloads even an
// unchanged file, and reports an invalid one as its error.
func TestWatcherReload(t *testing.T) {
	t.Parallel()
	w, b := setupWatcher(t, time.Hour)
	first := w.Current()
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	b.expectOK(t)
	if w.Current() == first || queueName(w.Current()) != "first" {
		t.Error("Reload did not load the file again")
	}

	writeFile(t, b.path, "queues: []\n")
	err := w.Reload()
	if !errors.Is(err, config.ErrInvalid) || err.Error() != b.path+":1: queues: expected at least one queue, got an empty list" {
		t.Errorf("Reload() = %v", err)
	}
	if got := b.expectFailure(t); !errors.Is(got, err) {
		t.Errorf("OnResult error = %v, want Reload's", got)
	}
	if queueName(w.Current()) != "first" {
		t.Error("an invalid reload replaced the config")
	}
}

// TestWatcherRun checks that Run notices a change by itself and returns
// when its context ends.
func TestWatcherRun(t *testing.T) {
	t.Parallel()
	w, b := setupWatcher(t, 5*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	writeFile(t, b.path, queueFile("run"))
	b.expectOK(t)
	if queueName(w.Current()) != "run" {
		t.Errorf("Current() = %q", queueName(w.Current()))
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run() = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestNewWatcherInvalid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := NewWatcher(filepath.Join(dir, "nope.yaml"), nil, config.Overrides{}, 0, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	path := filepath.Join(dir, "bad.yaml")
	writeFile(t, path, "queues: 1\n")
	if _, err := NewWatcher(path, nil, config.Overrides{}, 0, nil); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("invalid file: %v", err)
	}
}
