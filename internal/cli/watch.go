package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
)

// racyWindow is how recent a file's modification time must be for the
// Watcher to distrust it: a file rewritten twice within a file system's
// timestamp granularity (up to 2s on some) keeps its time, so the contents
// of a file modified this recently are hashed again at every look.
const racyWindow = 2 * time.Second

// DefaultReloadInterval is how often a Watcher looks at its file.
const DefaultReloadInterval = time.Second

// Watcher holds the running configuration and replaces it when its file
// changes (Run) or on request (Reload, which main calls on SIGHUP). An
// invalid reload keeps the running configuration: it is logged with every
// problem and reported to OnResult as a failure.
//
// Current is safe for concurrent use and cheap (an atomic load); callers
// take the *config.Config once per request and never modify it.
type Watcher struct {
	// OnReload, if set, is called after each successful reload with the
	// configuration that was running and the one now running. Set it before
	// Run or Reload; it must not call Reload.
	OnReload func(old, new *config.Config)
	// OnResult, if set, is called after each reload attempt, successful or
	// not; callers count spillway_config_reloads_total{result} with it. Set
	// it before Run or Reload; it must not call Reload.
	OnResult func(ok bool, err error)

	path     string
	getenv   func(string) string
	o        config.Overrides
	interval time.Duration
	logger   *slog.Logger

	current atomic.Pointer[config.Config]

	mu sync.Mutex // serialises reloads; guards the fields below
	// stat is what the file looked like when it was last read; nil when it
	// could not be.
	stat   os.FileInfo
	readAt time.Time
	// seen identifies the last state acted upon, a hash of the contents or
	// the error of reading them, so that a poll reports a state only once.
	seen string
}

// NewWatcher loads the configuration at path (as config.Load does, with getenv
// and o) and returns a Watcher holding it, or the problems that prevent
// it. interval is how often Run looks at the file (DefaultReloadInterval
// if ≤ 0); a nil logger discards.
func NewWatcher(path string, getenv func(string) string, o config.Overrides, interval time.Duration, logger *slog.Logger) (*Watcher, error) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{path: path, getenv: getenv, o: o, interval: interval, logger: logger}
	stat, data, err := w.read()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := config.LoadBytes(path, data, getenv, o)
	if err != nil {
		return nil, err
	}
	w.current.Store(c)
	w.stat, w.readAt, w.seen = stat, time.Now(), contentID(data)
	return w, nil
}

// Current returns the running configuration, never nil.
func (w *Watcher) Current() *config.Config { return w.current.Load() }

// Reload reads the file and the environment again, whether or not they
// changed, and replaces the running configuration if they and the overrides
// are valid. Otherwise it keeps the running one and returns the problems.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reload()
}

// Run looks at the file every interval until ctx is done and reloads it
// when it changed: its modification time, size or identity (an editor's
// rename over it), then its contents' hash, so that touching a file without
// changing it reloads nothing. A state of the file is reported once: a
// file that stays invalid or missing is not reported again at every look.
// Run returns ctx.Err().
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			w.poll()
		}
	}
}

// poll is one look of Run at the file.
func (w *Watcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	stat, err := os.Stat(w.path)
	if err == nil && w.unchanged(stat) {
		return
	}
	stat, data, err := w.read()
	id := contentID(data)
	if err != nil {
		id = "error:" + err.Error()
	}
	if id == w.seen {
		w.stat, w.readAt = stat, time.Now()
		return
	}
	_ = w.apply(stat, data, err) // reported to the logger and OnResult
}

// unchanged reports whether stat is the file last read, not modified since
// long enough before it was read that a change would show in its time.
func (w *Watcher) unchanged(stat os.FileInfo) bool {
	return w.stat != nil && os.SameFile(stat, w.stat) &&
		stat.Size() == w.stat.Size() && stat.ModTime().Equal(w.stat.ModTime()) &&
		stat.ModTime().Before(w.readAt.Add(-racyWindow))
}

func (w *Watcher) reload() error {
	stat, data, err := w.read()
	return w.apply(stat, data, err)
}

// read reads the file and what it looked like just before.
func (w *Watcher) read() (os.FileInfo, []byte, error) {
	stat, err := os.Stat(w.path)
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, nil, err
	}
	return stat, data, nil
}

// apply loads what read returned and swaps it in if it is valid.
func (w *Watcher) apply(stat os.FileInfo, data []byte, readErr error) error {
	w.stat, w.readAt = stat, time.Now()
	var c *config.Config
	err := readErr
	if err == nil {
		w.seen = contentID(data)
		c, err = config.LoadBytes(w.path, data, w.getenv, w.o)
	} else {
		w.seen = "error:" + err.Error()
		err = fmt.Errorf("config: %w", err)
	}
	if err != nil {
		w.logger.Error("config reload failed; keeping the running config", "file", w.path, "error", err,
			"problems", problemCount(err))
		if w.OnResult != nil {
			w.OnResult(false, err)
		}
		return err
	}
	old := w.current.Swap(c)
	w.logger.Info("config reloaded", "file", w.path, "queues", len(c.Queues))
	if w.OnReload != nil {
		w.OnReload(old, c)
	}
	if w.OnResult != nil {
		w.OnResult(true, nil)
	}
	return nil
}

func contentID(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func problemCount(err error) int {
	if ve, ok := errors.AsType[*config.ValidationError](err); ok {
		return len(ve.Problems)
	}
	return 1
}
