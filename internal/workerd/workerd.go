// Package workerd runs a worker process's queues: one worker.Worker per
// queue with the queue's handler, a pacer shared by every worker process,
// job-status records and the worker metrics (spillway_jobs_*,
// spillway_leak_rate, spillway_leak_rate_current, spillway_leak_pauses_total,
// spillway_key_pushback_pauses_total,
// spillway_dead_letters_total). cmd/worker and
// `admitter --dev` both run it.
//
// # Pacing
//
// A queue's backlog leak is global across worker processes. Without
// redis.url the pacer keeps its state in JetStream (pace.KVPacer: one
// key-value entry per queue, updated by compare-and-set), so NATS alone
// gives a global leak. With redis.url it paces in Redis and falls back to
// the JetStream pacer while Redis is unreachable (pace.FailoverPacer), so a
// Redis outage does not stop the drain. docs/reliability.md has the
// figures. Either pacer runs inside a pace.YieldingPacer: a handler's
// pushback pauses the leak of every worker process, and an adaptive
// leak's rate is cut and climbs back, through one more entry in the same
// key-value bucket (docs/design.md#pushback).
//
// # Reloading
//
// Pool.Reload applies a new configuration without dropping a job: a queue
// whose leak rate (or adaptive setting) alone changed keeps its worker and
// its pacer takes the new rate at the next booking; a queue whose worker settings changed
// (concurrency, handler, retry policy, backlog bounds, ack wait, grace
// period) gets a new worker.Worker, started before the old one is stopped
// gracefully — the old one's running handlers finish within the grace
// period (meanwhile both run, so the queue briefly has up to old + new
// concurrency handlers), and the backlog jobs it held are handed back to
// JetStream, where the new one takes them; a new queue starts and a
// removed one stops the same graceful way. A configuration that cannot be applied (a queue given
// with --queues is gone, a handler cannot be built) changes nothing.
package workerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
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
	// PacerStore is the shared store the backlog pacer uses first — Redis —
	// with the JetStream pacer as its fallback; nil paces in JetStream
	// alone. Either way the leak is shared by every worker process.
	PacerStore bucket.Store
	// Recorder writes job-status records; nil keeps none.
	Recorder *jobstatus.Recorder
	// Handlers overrides the handler of a queue by name (tests, embedding).
	Handlers map[string]worker.Handler
	// Registerer receives the worker metrics; nil records none.
	Registerer prometheus.Registerer
	// HTTPClient sends the http handlers' requests; nil: one
	// handler.NewHTTPClient for every queue.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Run works the queues until ctx ends, then stops each worker gracefully
// (in-flight jobs finish within the grace period; the rest are handed
// back). It returns the first worker error.
func Run(ctx context.Context, o Options) error {
	p, err := Start(ctx, o)
	if err != nil {
		return err
	}
	return p.Wait()
}

// Pool is a running set of queue workers that a new configuration can be
// applied to (Reload).
type Pool struct {
	o       Options
	m       *metrics
	kv      jetstream.KeyValue
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	firstMu sync.Mutex
	first   error

	mu      sync.Mutex // serialises Reload; guards the fields below
	running map[string]*running
	pacers  map[string]*pace.YieldingPacer // kept when a queue goes, for when it comes back

	cost *costSettler // cost.go
	// keyPauses follow each queue's paused keys (pushback scope key),
	// shared by its successive workers, made on first use.
	keyPauses map[string]*pace.KeyPauses
}

// running is one queue's current worker.
type running struct {
	spec spec
	stop context.CancelFunc
	done chan struct{}
}

// spec is everything a queue's worker is built from but the leak rate and
// whether it is adaptive, which its pacer changes in place.
type spec struct {
	backlog     queue.Config // LeakRate and Adaptive zeroed
	retry       retry.Policy
	handler     handler.Config
	concurrency int
	ackWait     time.Duration
	grace       time.Duration
}

// Start starts a worker for each queue and returns at once; the workers
// run until ctx ends (Wait).
func Start(ctx context.Context, o Options) (*Pool, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPClient == nil {
		// One client for every queue's handler: it keeps a connection per
		// busy slot and follows only the redirects that keep the POST.
		o.HTTPClient = handler.NewHTTPClient()
	}
	if o.Config == nil || o.JS == nil {
		return nil, errors.New("workerd: Options need Config and JS")
	}
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	kv, err := pace.OpenPacerBucket(kctx, o.JS, max(o.Config.NATS.Replicas, 1))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("workerd: %w", err)
	}
	p := &Pool{o: o, m: newMetrics(o.Registerer), kv: kv, running: map[string]*running{}, pacers: map[string]*pace.YieldingPacer{}}
	p.cost = newCostSettler(o.NC, o.Registerer)
	p.ctx, p.cancel = context.WithCancel(ctx)
	if err := p.apply(o.Config); err != nil {
		p.cancel()
		p.wg.Wait()
		return nil, err
	}
	if o.PacerStore == nil {
		o.Logger.Info("workerd: pacing backlogs in JetStream (no redis.url): the leak rate is shared by every worker process")
	}
	return p, nil
}

// Wait blocks until every worker has stopped (ctx ended, or a worker
// failed) and returns the first worker error.
func (p *Pool) Wait() error {
	<-p.ctx.Done()
	p.wg.Wait()
	p.firstMu.Lock()
	defer p.firstMu.Unlock()
	return p.first
}

// Reload applies cfg: see the package documentation. It returns an error,
// having changed nothing, when cfg cannot be applied.
func (p *Pool) Reload(cfg *config.Config) error {
	if p.ctx.Err() != nil {
		return errors.New("workerd: stopped")
	}
	return p.apply(cfg)
}

// plan is one queue's worker to start.
type plan struct {
	q    *config.Queue
	spec spec
	h    worker.Handler
}

func (p *Pool) apply(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	queues, err := pick(cfg, p.o.Queues, p.o.Handlers)
	if err != nil {
		return err
	}
	// Everything that can fail first, so that a failure changes nothing.
	var starts []plan
	keep := map[string]bool{}
	for _, q := range queues {
		keep[q.Name] = true
		if _, err := bucket.NewLeakyBucket(q.Backlog.LeakRate, 1, 0); err != nil {
			return fmt.Errorf("workerd: queue %s: leak_rate: %w", q.Name, err)
		}
		sp := p.specOf(cfg, q)
		if r := p.running[q.Name]; r != nil && reflect.DeepEqual(r.spec, sp) {
			continue
		}
		h, ok := p.o.Handlers[q.Name]
		if !ok {
			if h, err = handler.New(q.Handler, p.o.NC, p.o.HTTPClient, p.o.Logger); err != nil {
				return fmt.Errorf("workerd: queue %s: %w", q.Name, err)
			}
		}
		starts = append(starts, plan{q: q, spec: sp, h: h})
	}
	workers := make([]*worker.Worker, len(starts))
	for i, st := range starts {
		pc, err := p.pacer(st.q)
		if err != nil {
			return err
		}
		if workers[i], err = p.newWorker(cfg, st, pc); err != nil {
			return err
		}
	}

	// Leak rates, in place.
	for _, q := range queues {
		pc := p.pacers[q.Name]
		if pc != nil {
			_ = pc.SetRate(q.Backlog.LeakRate) // the rate was checked above
			pc.SetAdaptive(q.Backlog.Adaptive)
		}
		p.m.setLeak(q.Name, q.Backlog.LeakRate, pc)
		p.m.initQueue(q.Name)
	}
	// New workers first, then the old ones stop: no gap in the drain.
	for i, st := range starts {
		old := p.running[st.q.Name]
		p.running[st.q.Name] = p.launch(st.q.Name, st.spec, workers[i])
		if old != nil {
			p.o.Logger.Info("workerd: queue settings changed: a new worker took over; the old one finishes its running jobs", "queue", st.q.Name)
			old.stop()
		} else if p.o.Config != cfg {
			p.o.Logger.Info("workerd: queue added", "queue", st.q.Name)
		}
	}
	for name, r := range p.running {
		if !keep[name] {
			p.o.Logger.Info("workerd: queue removed: its worker finishes its running jobs and stops", "queue", name)
			r.stop()
			delete(p.running, name)
			p.m.dropLeak(name)
		}
	}
	p.o.Config = cfg
	return nil
}

func (p *Pool) specOf(cfg *config.Config, q *config.Queue) spec {
	b := q.Backlog
	b.LeakRate, b.Adaptive = bucket.Rate{}, false
	conc := p.o.Concurrency
	if conc == 0 {
		conc = cfg.Worker.Concurrency
	}
	return spec{backlog: b, retry: q.Retry, handler: q.Handler, concurrency: conc, ackWait: cfg.Worker.AckWait, grace: cfg.Worker.GracePeriod}
}

// pacer returns the queue's pacer, made on first use: a YieldingPacer, so
// that a handler's pushback pauses the leak of every worker, over the
// JetStream pacer or the Redis one with JetStream as its fallback.
func (p *Pool) pacer(q *config.Queue) (*pace.YieldingPacer, error) {
	if pc := p.pacers[q.Name]; pc != nil {
		return pc, nil
	}
	kvp, err := pace.NewKVPacer(p.kv, q.Name, q.Backlog.LeakRate)
	if err != nil {
		return nil, fmt.Errorf("workerd: queue %s: %w", q.Name, err)
	}
	var pc pace.RatePacer = kvp
	if p.o.PacerStore != nil {
		sp, err := pace.NewPacer(p.o.PacerStore, q.Name, q.Backlog.LeakRate)
		if err != nil {
			return nil, fmt.Errorf("workerd: queue %s: %w", q.Name, err)
		}
		fp, err := pace.NewFailoverPacer(sp, kvp)
		if err != nil {
			return nil, fmt.Errorf("workerd: queue %s: %w", q.Name, err)
		}
		log := p.o.Logger.With("queue", q.Name)
		js, stream := p.o.JS, queue.GrantsStreamName(q.Name)
		fp.Peers = func(ctx context.Context) int {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c, err := js.Consumer(ctx, stream, worker.GrantsConsumer)
			if err != nil {
				return 1
			}
			return max(c.CachedInfo().NumWaiting, 1)
		}
		fp.OnSwitch = func(fallback bool, err error) {
			if fallback {
				log.Warn("pacing the backlog in JetStream: the Redis pacer is unreachable (or was, for another worker); the leak rate still holds", "error", err)
			} else {
				log.Info("pacing the backlog in Redis again")
			}
		}
		pc = fp
	}
	yp, err := pace.NewYieldingPacer(pc, p.kv, q.Name, q.Backlog.LeakRate, q.Backlog.Adaptive)
	if err != nil {
		return nil, fmt.Errorf("workerd: queue %s: %w", q.Name, err)
	}
	p.pacers[q.Name] = yp
	return yp, nil
}

func (p *Pool) newWorker(cfg *config.Config, st plan, pc *pace.YieldingPacer) (*worker.Worker, error) {
	observe := p.m.observe
	var gate, outcome func(context.Context, worker.Event) error
	if p.o.Recorder != nil {
		rec := p.o.Recorder
		observe = func(e worker.Event) { p.m.observe(e); rec.Observe(e) }
		gate = rec.StartGate // a cancel and a start: one wins (docs/design.md#cancel)
		// An admitted job has no record until its outcome: written
		// before its ack, so a reader finds it in READY or in its record.
		outcome = rec.Outcome
	}
	w, err := worker.NewWorker(p.o.JS, worker.WorkerConfig{
		Queue:       st.q.Backlog,
		Concurrency: st.spec.concurrency,
		Retry:       st.q.Retry,
		Pacer:       pc,
		AckWait:     cfg.Worker.AckWait,
		GracePeriod: cfg.Worker.GracePeriod,
		Logger:      p.o.Logger.With("queue", st.q.Name),
		Observe:     observe,
		StartGate:   gate,
		Outcome:     outcome,
		SettleCost:  p.cost.settle,
		KeyPauses:   p.keyPausesOf(st.q),
	}, st.h)
	if err != nil {
		return nil, fmt.Errorf("workerd: queue %s: %w", st.q.Name, err)
	}
	return w, nil
}

// launch runs w until the pool stops or the returned worker is stopped.
func (p *Pool) launch(name string, sp spec, w *worker.Worker) *running {
	ctx, stop := context.WithCancel(p.ctx)
	r := &running{spec: sp, stop: stop, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(r.done)
		defer stop()
		err := w.Run(ctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			p.firstMu.Lock()
			if p.first == nil {
				p.first = fmt.Errorf("workerd: queue %s: %w", name, err)
			}
			p.firstMu.Unlock()
			p.cancel() // one queue failing stops the process: a supervisor restarts it whole
		}
	}()
	return r
}

// pick returns the queues to work: the named ones (each must exist and
// have a handler), or every queue with a handler.
func pick(cfg *config.Config, names []string, overrides map[string]worker.Handler) ([]*config.Queue, error) {
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
	if p.NC, err = conn.NATS(cfg.NATS.NATSConfig, "spillway-worker", log); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() { _ = p.NC.Drain() })
	if p.JS, err = jetstream.New(p.NC); err != nil {
		return nil, err
	}
	if cfg.Redis.Shared() {
		client, st, err := conn.Redis(cfg.Redis.RedisConfig)
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, func() { _ = client.Close() })
		if err := conn.RedisAuth(ctx, client, cfg.Redis.RedisConfig); err != nil {
			return nil, err
		}
		p.Pacer = st
	}
	st, err := jobstatus.Open(ctx, p.JS, cfg.Status.TTL, max(cfg.NATS.Replicas, 1))
	if err != nil {
		return nil, err
	}
	p.Recorder = jobstatus.NewRecorder(st, log, 4096)
	p.Recorder.SetRecordRunning(cfg.Status.RecordRunning)
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
// Config, PacerStore, Recorder and Logger are filled in. started, if not
// nil, is called with the pool once its workers run, so that the caller
// can reload it.
func (p *Process) Run(ctx context.Context, o Options, started func(*Pool)) error {
	o.NC, o.JS, o.Config, o.PacerStore, o.Recorder, o.Logger = p.NC, p.JS, p.Config, p.Pacer, p.Recorder, p.Logger
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	recDone := make(chan struct{})
	go func() { defer close(recDone); _ = p.Recorder.Run(rctx) }()
	defer func() {
		cancel() // after the workers: the last events are recorded first
		<-recDone
	}()
	pool, err := Start(ctx, o)
	if err != nil {
		return err
	}
	if started != nil {
		started(pool)
	}
	return pool.Wait()
}

// Close closes the connections.
func (p *Process) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}
