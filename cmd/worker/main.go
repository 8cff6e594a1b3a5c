// Command worker runs Spillway jobs: admitted jobs at once and backlog jobs
// at each queue's leak rate, shared with every other worker process
// (DESIGN §4).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spillway-dev/spillway/internal/cli"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/workerd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A worker does not reload its configuration (restart it to apply a
	// change); SIGHUP — say, from a "reload everything" script — must not
	// end it without its graceful stop, as Go's default action would.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			fmt.Fprintln(os.Stderr, "worker: SIGHUP ignored: a worker does not reload its configuration; restart it (SIGTERM stops it gracefully)")
		}
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
}

const usage = `worker — runs Spillway jobs through each queue's handler

Usage:
  worker --config FILE [--queues a,b] [--concurrency N] [flags]

Admitted jobs run as fast as --concurrency allows; backlog jobs start at the
queue's backlog.leak_rate in total across all worker processes, paced in
Redis (redis.url). Without Redis each process paces alone: run one worker
process per queue then, or each drains at the full leak rate.

SIGTERM or Ctrl-C: stop pulling, let running jobs finish within
worker.grace_period, hand the rest back to JetStream.

Flags:
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f cli.Flags
	f.Register(fs, false)
	queues := fs.String("queues", "", "comma-separated `names` of the queues to work (default: every queue with a handler)")
	metricsAddr := fs.String("metrics-listen", ":9090", "`address` of /metrics, /livez and /readyz (empty: none)")
	if done, err := cli.Parse(fs, usage, args, stdout); done || err != nil {
		return err
	}
	if f.Config == "" {
		return errors.New("no configuration: give --config FILE (see worker --help)")
	}
	log, err := f.Logger(stderr)
	if err != nil {
		return err
	}
	o, err := f.Overrides(fs)
	if err != nil {
		return err
	}
	cfg, err := config.Load(f.Config, getenv, o)
	if err != nil {
		return err
	}
	var names []string
	if *queues != "" {
		for _, n := range strings.Split(*queues, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
	log.Info("worker started", "nats", conn.Redact(p.NC.ConnectedUrl()), "redis", cfg.Redis.URL != "")
	return p.Run(ctx, workerd.Options{Queues: names, Registerer: reg})
}
