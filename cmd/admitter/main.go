// Command admitter is Spillway's front door: it admits, queues or rejects
// submitted jobs over NATS and HTTP (docs/design.md#doors). With --dev it also runs an
// embedded JetStream server and the queues' workers: one command, no other
// server.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/cli"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/devnats"
)

func main() { os.Exit(cli.Main("admitter", run)) }

const usage = `admitter — Spillway's front door: admits, queues or rejects jobs (NATS and HTTP)

Usage:
  admitter --config FILE [flags]
  admitter --dev [--config FILE] [flags]

--dev runs everything in one process: an embedded NATS server with
JetStream on nats.listen (default 127.0.0.1:4222), the in-memory bucket
store (Redis if redis.url is set), and the queues' workers. Without
--config it serves the built-in queue "demo" (leaky_bucket 5/s, burst 20,
delay 5, backlog 100 at 5/s) whose handler logs each job.

Configuration: flags > SPILLWAY_* environment > file > defaults. The file
is reloaded on SIGHUP and when it changes; an invalid file is reported and
the running configuration stays. The key files (http.api_keys_file,
http.admin_keys_file) are read again the same way: a key removed from its
file is refused within a second, no restart needed.

Flags:
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, reload <-chan struct{}) error {
	var f cli.Flags
	fs := f.FlagSet("admitter", true, stderr)
	dev := fs.Bool("dev", false, "dev mode: embedded JetStream, in-process workers, built-in demo queue without --config")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof), finished at shutdown")
	if done, err := cli.Parse(fs, usage, args, stdout); done || err != nil {
		return err
	}
	if *cpuprofile != "" {
		stop, err := cli.StartCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	log, o, err := f.Setup(fs, stderr)
	if err != nil {
		return err
	}
	if f.Config == "" && !*dev {
		return errors.New("no configuration: give --config FILE, or --dev to try Spillway with the built-in demo queue")
	}
	var (
		cfg     *config.Config
		watcher *cli.Watcher
	)
	if f.Config != "" {
		if watcher, err = cli.NewWatcher(f.Config, getenv, o, 0, log); err != nil {
			return err
		}
		cfg = watcher.Current()
	} else if cfg, err = config.LoadDev("", getenv, o); err != nil {
		return err
	}

	if *dev {
		// The embedded server takes no credentials.
		if w := devnats.ExposureWarning(cfg.NATS.Listen, false); w != "" {
			log.Warn(w, "nats_listen", cfg.NATS.Listen)
		}
	}
	svc, err := admitterd.Start(ctx, admitterd.Options{Config: cfg, Dev: *dev, Logger: log})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "spillway admitter: http://%s  nats %s  queues:", svc.HTTPAddr(), svc.NATSURL())
	for _, q := range cfg.Queues {
		fmt.Fprintf(stdout, " %s", q.Name)
	}
	fmt.Fprintln(stdout)

	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	if watcher != nil {
		watcher.OnReload = func(_, next *config.Config) {
			rctx, cancel := context.WithTimeout(wctx, 15*time.Second)
			defer cancel()
			if err := svc.Reload(rctx, next); err != nil {
				log.Error("applying the reloaded configuration failed; the admitter keeps its previous queues", "err", err)
			} else {
				log.Info("configuration reloaded", "file", f.Config, "queues", len(next.Queues))
			}
		}
		watcher.OnResult = func(ok bool, _ error) {
			if !ok {
				svc.ReloadFailed()
			}
		}
	}
	// SIGHUP reads the key files again too, with a configuration file or without.
	r := &cli.Reloader{Watcher: watcher, Requests: reload, OnRequest: svc.ReloadKeys, Logger: log}
	go func() { _ = r.Run(wctx) }()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: answering submissions in progress, then stopping")
	case runErr = <-svc.Err():
		log.Error("a part of the admitter failed; shutting down", "err", runErr)
	}
	grace := cfg.Worker.GracePeriod + 15*time.Second
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	return errors.Join(runErr, svc.Shutdown(sctx))
}
