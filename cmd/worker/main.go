// Command worker runs Spillway jobs: admitted jobs at once and backlog jobs
// at each queue's leak rate, shared with every other worker process
// (docs/design.md#workers).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spillway-dev/spillway/internal/cli"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/workerd"
)

func main() { os.Exit(cli.Main("worker", run)) }

const usage = `worker — runs Spillway jobs through each queue's handler

Usage:
  worker --config FILE [--queues a,b] [--concurrency N] [flags]

Admitted jobs run as fast as --concurrency allows; backlog jobs start at the
queue's backlog.leak_rate in total across all worker processes, paced in
JetStream (or in Redis when redis.url is set, with JetStream taking over
while Redis is unreachable).

The file is reloaded on SIGHUP and when it changes: leak rates, queues,
handlers, retry policies and concurrency change without dropping a job; an
invalid file is reported and the running configuration stays. Connection
settings (nats, redis) take a restart.

SIGTERM or Ctrl-C: stop pulling, let running jobs finish within
worker.grace_period, hand the rest back to JetStream.

Flags:
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, reload <-chan struct{}) error {
	var f cli.Flags
	fs := f.FlagSet("worker", false, stderr)
	queues := fs.String("queues", "", "comma-separated `names` of the queues to work (default: every queue with a handler)")
	metricsAddr := fs.String("metrics-listen", ":9090", "`address` of /metrics, /livez and /readyz (empty: none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run, until the worker stops, to `FILE` (go tool pprof)")
	if done, err := cli.Parse(fs, usage, args, stdout); done || err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := cli.StartCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if f.Config == "" {
		return errors.New("no configuration: give --config FILE (see worker --help)")
	}
	log, o, err := f.Setup(fs, stderr)
	if err != nil {
		return err
	}
	watcher, err := cli.NewWatcher(f.Config, getenv, o, 0, log)
	if err != nil {
		return err
	}
	cfg := watcher.Current()
	var names []string
	if *queues != "" {
		for _, n := range strings.Split(*queues, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}

	reg := prometheus.NewRegistry()
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_config_reloads_total",
		Help: "Configuration reloads, by result (success, failure).",
	}, []string{"result"})
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), reloads)
	for _, result := range []string{"success", "failure"} {
		reloads.WithLabelValues(result) // at 0 from the start: the first failure is an increase
	}
	p, err := workerd.Connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer p.Close()

	if *metricsAddr != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", *metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if err := p.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		fmt.Fprintf(stdout, "spillway worker: metrics on http://%s/metrics\n", ln.Addr())
	}
	log.Info("worker started", "nats", conn.Redact(p.NC.ConnectedUrl()), "redis", cfg.Redis.Shared())
	return p.Run(ctx, workerd.Options{Queues: names, Registerer: reg}, func(pool *workerd.Pool) {
		watcher.OnReload = func(old, next *config.Config) {
			if old.NATS != next.NATS || old.Redis != next.Redis {
				log.Warn("nats and redis settings are not reloaded: restart the worker to apply them", "file", f.Config)
			}
			if err := pool.Reload(next); err != nil {
				reloads.WithLabelValues("failure").Inc()
				log.Error("applying the reloaded configuration failed; the workers keep their previous settings", "err", err)
				return
			}
			reloads.WithLabelValues("success").Inc()
			log.Info("configuration applied to the workers", "file", f.Config, "queues", len(next.Queues))
		}
		watcher.OnResult = func(ok bool, _ error) {
			if !ok {
				reloads.WithLabelValues("failure").Inc()
			}
		}
		r := &cli.Reloader{Watcher: watcher, Requests: reload, Logger: log}
		go func() { _ = r.Run(ctx) }()
	})
}
