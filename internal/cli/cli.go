// Package cli holds what the admitter and worker commands share: the flags
// that override configuration, the logger, and the reload loop.
//
// # Reloading
//
// A Watcher holds the running configuration. main calls Reload on SIGHUP
// (signals belong to main) and runs Run to pick up changes of the file,
// found by polling its modification time, size and contents' hash, which
// also sees an editor's rename over the file. An invalid reload keeps the
// running configuration, is logged, and is reported to the OnResult hook.
// The admitter applies a reload's queues, limits, fairness weights (to
// the jobs submitted after it) and redis.failure_mode (its decisions and
// /readyz follow the new mode); redis.url and redis.timeout take effect
// at its next start.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
)

// Flags are the configuration flags common to the admitter and the worker.
type Flags struct {
	Config string

	natsURL, natsListen, natsCreds, redisURL, failureMode, httpListen string
	redisTimeout, gracePeriod                                         time.Duration
	concurrency                                                       int
	LogLevel, LogFormat                                               string
}

// FlagSet returns a command's flag set, reporting errors to stderr, with
// the common flags defined (Register).
func (f *Flags) FlagSet(name string, admitter bool, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.Register(fs, admitter)
	return fs
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet, admitter bool) {
	fs.StringVar(&f.Config, "config", "", "the YAML configuration `file` (see docs/design.md#configuration)")
	fs.StringVar(&f.natsURL, "nats-url", "", "NATS server `URL`s, comma-separated (nats.url; env SPILLWAY_NATS_URL)")
	fs.StringVar(&f.natsCreds, "nats-creds", "", "NATS credentials `file` (nats.creds_file)")
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis `URL` of the shared bucket store (redis.url; env SPILLWAY_REDIS_URL)")
	fs.DurationVar(&f.redisTimeout, "redis-timeout", 0, "budget of one Redis decision (redis.timeout, default 50ms)")
	if admitter {
		fs.StringVar(&f.natsListen, "nats-listen", "", "with --dev: where the embedded NATS server listens (nats.listen, default 127.0.0.1:4222)")
		fs.StringVar(&f.failureMode, "failure-mode", "", "when Redis fails: open, closed or local (redis.failure_mode)")
		fs.StringVar(&f.httpListen, "http-listen", "", "HTTP front door `address` (http.listen, default :8080)")
	}
	fs.IntVar(&f.concurrency, "concurrency", 0, "handlers running at once per queue (worker.concurrency, default 16)")
	fs.DurationVar(&f.gracePeriod, "grace-period", 0, "how long running jobs may finish at shutdown (worker.grace_period, default 30s)")
	fs.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", "text", "text or json")
}

// Overrides returns the flags the user set, as configuration overrides:
// flags win over the environment and the file.
func (f *Flags) Overrides(fs *flag.FlagSet) (config.Overrides, error) {
	var o config.Overrides
	var err error
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "nats-url":
			o.NATSURL = &f.natsURL
		case "nats-listen":
			o.NATSListen = &f.natsListen
		case "nats-creds":
			o.NATSCredsFile = &f.natsCreds
		case "redis-url":
			o.RedisURL = &f.redisURL
		case "redis-timeout":
			o.RedisTimeout = &f.redisTimeout
		case "failure-mode":
			m := config.FailureMode(f.failureMode)
			switch m {
			case config.FailOpen, config.FailClosed, config.FailLocal:
				o.RedisFailureMode = &m
			default:
				err = fmt.Errorf("--failure-mode %q: want open, closed or local", f.failureMode)
			}
		case "http-listen":
			o.HTTPListen = &f.httpListen
		case "concurrency":
			o.WorkerConcurrency = &f.concurrency
		case "grace-period":
			o.WorkerGracePeriod = &f.gracePeriod
		}
	})
	return o, err
}

// Logger builds the process logger.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.LogFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.LogFormat)
}

// Reloader ties a Watcher to the process: file changes and reload
// requests (SIGHUP, sent to Requests by main) apply new configurations
// through the Watcher's hooks; invalid ones are kept out and logged.
type Reloader struct {
	// Watcher is the configuration's; nil when the process runs without a
	// file (the admitter's --dev): requests then only call OnRequest.
	Watcher  *Watcher
	Requests <-chan struct{}
	// OnRequest, if set, is called at each request before the
	// configuration is read again, whether or not that succeeds: what the
	// process reads besides the configuration (the admitter's key files).
	OnRequest func()
	Logger    *slog.Logger
}

// Run watches until ctx ends; it returns ctx.Err().
func (r *Reloader) Run(ctx context.Context) error {
	requests := func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.Requests:
				if r.OnRequest != nil {
					r.OnRequest()
				}
				if r.Watcher == nil {
					continue
				}
				if err := r.Watcher.Reload(); err != nil {
					r.Logger.Warn("reload on SIGHUP failed; the running configuration stays", "err", err)
				}
			}
		}
	}
	if r.Watcher == nil {
		requests()
		return ctx.Err()
	}
	go requests()
	return r.Watcher.Run(ctx)
}

// Parse parses args with fs, whose usage text is usage followed by the
// flags. --help (or "help") prints that to stdout and reports done; a
// stray argument is an error naming the command's --help.
func Parse(fs *flag.FlagSet, usage string, args []string, stdout io.Writer) (done bool, err error) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	help := func() (bool, error) {
		fs.SetOutput(stdout)
		fs.Usage()
		return true, nil
	}
	if len(args) > 0 && args[0] == "help" {
		return help()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return help()
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected argument %q (see %s --help)", fs.Arg(0), fs.Name())
	}
	return false, nil
}

// Setup builds the logger and the configuration overrides from the parsed
// flags of fs: what every command does right after Parse.
func (f *Flags) Setup(fs *flag.FlagSet, stderr io.Writer) (*slog.Logger, config.Overrides, error) {
	log, err := f.Logger(stderr)
	if err != nil {
		return nil, config.Overrides{}, err
	}
	o, err := f.Overrides(fs)
	if err != nil {
		return nil, config.Overrides{}, err
	}
	return log, o, nil
}

// RunFunc is a command's body: main's wiring is passed in, so tests call it
// with their own. reload receives a request per SIGHUP, for a Reloader.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, reload <-chan struct{}) error

// Main is the body of a command's main: it runs run with the process's
// arguments, environment, output and signals, prints an error as
// "name: error" and returns the exit code (2 on an error), which main
// passes to os.Exit: only main exits. Signals are handled here, for main,
// never in a library.
func Main(name string, run RunFunc) int {
	ctx, stop, reload := signals()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, reload)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		return 2
	}
	return 0
}

// signals is a command's signal wiring: ctx ends on SIGINT or SIGTERM
// (stop releases that), and every SIGHUP is a request on reload. Requests
// coalesce: while one waits, another SIGHUP adds nothing.
func signals() (ctx context.Context, stop context.CancelFunc, reload <-chan struct{}) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	requests := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case requests <- struct{}{}:
			default:
			}
		}
	}()
	return ctx, stop, requests
}
