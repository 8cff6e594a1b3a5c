// Package workerd runs a worker process's queues: one queue.Worker per
// queue with the queue's handler, a shared pacer (Redis when configured),
// job-status records and the worker metrics of DESIGN §6. cmd/worker and
// `admitter --dev` both run it.
package workerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// Options are a worker process's parts. NC, JS and Config are required.
type Options struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Config *config.Config
	// Queues to work (default: every queue with a handler).
	Queues []string
	// Concurrency per queue (default Config.Worker.Concurrency).
	Concurrency int
	// PacerStore is the store the backlog pacer uses: a Redis store shared
	// by every worker process, or nil for one in this process's memory
	// (right only when this is the one worker process).
	PacerStore bucket.Store
	// Recorder writes job-status records; nil keeps none.
	Recorder *jobstatus.Recorder
	// Handlers overrides the handler of a queue by name (tests, embedding).
	Handlers map[string]queue.Handler
	// Registerer receives the worker metrics; nil records none.
	Registerer prometheus.Registerer
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Run works the queues until ctx ends, then stops each worker gracefully
// (in-flight jobs finish within the grace period; the rest are handed
// back). It returns the first worker error.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	queues, err := pick(o.Config, o.Queues, o.Handlers)
	if err != nil {
		return err
	}
	m := newMetrics(o.Registerer)
	type job struct {
		w *queue.Worker
		q string
	}
	var jobs []job
	for _, q := range queues {
		h, ok := o.Handlers[q.Name]
		if !ok {
			if h, err = handler.New(q.Handler, o.NC, o.HTTPClient, o.Logger); err != nil {
				return fmt.Errorf("workerd: queue %s: %w", q.Name, err)
			}
		}
		pacerStore := o.PacerStore
		if pacerStore == nil {
			if pacerStore, err = bucket.NewMemory(); err != nil {
				return err
			}
		}
		pacer, err := queue.NewPacer(pacerStore, q.Name, q.Backlog.LeakRate)
		if err != nil {
			return fmt.Errorf("workerd: queue %s: %w", q.Name, err)
		}
		conc := o.Concurrency
		if conc == 0 {
			conc = o.Config.Worker.Concurrency
		}
		m.setLeak(q.Name, q.Backlog.LeakRate)
		m.initQueue(q.Name)
		observe := m.observe
		if o.Recorder != nil {
			rec := o.Recorder
			observe = func(e queue.Event) { m.observe(e); rec.Observe(e) }
		}
		w, err := queue.NewWorker(o.JS, queue.WorkerConfig{
			Queue:       q.Backlog,
			Concurrency: conc,
			Retry:       q.Retry,
			Pacer:       pacer,
			AckWait:     o.Config.Worker.AckWait,
			GracePeriod: o.Config.Worker.GracePeriod,
			Logger:      o.Logger.With("queue", q.Name),
			Observe:     observe,
		}, h)
		if err != nil {
			return fmt.Errorf("workerd: queue %s: %w", q.Name, err)
		}
		jobs = append(jobs, job{w, q.Name})
	}
	if o.PacerStore == nil && len(jobs) > 0 {
		o.Logger.Info("workerd: pacing backlogs in this process's memory; with several worker processes configure redis.url, or each drains at the full leak rate")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := j.w.Run(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("workerd: queue %s: %w", j.q, err)
				}
				mu.Unlock()
				cancel() // one queue failing stops the process: a supervisor restarts it whole
			}
		}()
	}
	wg.Wait()
	return first
}

// pick returns the queues to work: the named ones (each must exist and
// have a handler), or every queue with a handler.
func pick(cfg *config.Config, names []string, overrides map[string]queue.Handler) ([]*config.Queue, error) {
	hasHandler := func(q *config.Queue) bool {
		_, ok := overrides[q.Name]
		return ok || q.Handler.HTTP != nil || q.Handler.NATS != nil || q.Handler.Log
	}
	var out []*config.Queue
	if len(names) == 0 {
		for i := range cfg.Queues {
			if hasHandler(&cfg.Queues[i]) {
				out = append(out, &cfg.Queues[i])
			}
		}
		if len(out) == 0 {
			return nil, errors.New("workerd: no queue has a handler; give a queue `handler:` in the config")
		}
		return out, nil
	}
	for _, n := range names {
		q := cfg.Queue(n)
		if q == nil {
			var known []string
			for _, q := range cfg.Queues {
				known = append(known, q.Name)
			}
			return nil, fmt.Errorf("workerd: no queue %q in %s (queues: %s)", n, cfg.Source, strings.Join(known, ", "))
		}
		if !hasHandler(q) {
			return nil, fmt.Errorf("workerd: queue %q has no handler in %s", n, cfg.Source)
		}
		out = append(out, q)
	}
	return out, nil
}

// Process is a worker process's connections: NATS, JetStream, the pacer's
// Redis store when configured, and job-status records.
type Process struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Config   *config.Config
	Pacer    bucket.Store // nil: in-memory pacing
	Recorder *jobstatus.Recorder
	Logger   *slog.Logger
	closers  []func()
}

// Connect opens what a worker process needs for cfg.
func Connect(ctx context.Context, cfg *config.Config, log *slog.Logger) (_ *Process, err error) {
	// Not the named result: a failure returns nil, and the deferred Close
	// must still see what was opened.
	p := &Process{Config: cfg, Logger: log}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.NC, err = conn.NATS(cfg.NATS.URL, cfg.NATS.CredsFile, "spillway-worker", log); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() { _ = p.NC.Drain() })
	if p.JS, err = jetstream.New(p.NC); err != nil {
		return nil, err
	}
	if cfg.Redis.URL != "" {
		client, st, err := conn.Redis(cfg.Redis)
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, func() { _ = client.Close() })
		if err := conn.RedisAuth(ctx, client, cfg.Redis.URL); err != nil {
			return nil, err
		}
		p.Pacer = st
	}
	st, err := jobstatus.Open(ctx, p.JS, cfg.Status.TTL, max(cfg.NATS.Replicas, 1))
	if err != nil {
		return nil, err
	}
	p.Recorder = jobstatus.NewRecorder(st, log, 4096)
	return p, nil
}

// Ready reports why the process cannot work now, or nil.
func (p *Process) Ready() error {
	if !p.NC.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", p.NC.Status())
	}
	return nil
}

// Run works the queues with this process's connections; o's NC, JS,
// Config, PacerStore, Recorder and Logger are filled in.
func (p *Process) Run(ctx context.Context, o Options) error {
	o.NC, o.JS, o.Config, o.PacerStore, o.Recorder, o.Logger = p.NC, p.JS, p.Config, p.Pacer, p.Recorder, p.Logger
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	recDone := make(chan struct{})
	go func() { defer close(recDone); _ = p.Recorder.Run(rctx) }()
	err := Run(ctx, o)
	cancel() // after the workers: the last events are recorded first
	<-recDone
	return err
}

// Close closes the connections.
func (p *Process) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}
