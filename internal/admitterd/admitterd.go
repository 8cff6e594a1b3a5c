// Package admitterd assembles an admitter process from a configuration:
// the NATS connection (or, in dev mode, an embedded JetStream server), the
// queues' streams, the bucket store with its failure mode, the HTTP and
// NATS front doors, job status, metrics and — in dev mode — the workers.
// cmd/admitter is its command line; tests run it in-process.
package admitterd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/devnats"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/internal/ui"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Options configure a Service. Config is required.
type Options struct {
	Config *config.Config
	// Dev runs an embedded JetStream server on Config.NATS.Listen and the
	// queues' workers in this process.
	Dev bool
	// Registry receives every metric, Go and process collectors included
	// (default: a new registry).
	Registry *prometheus.Registry
	// Handlers overrides queue handlers of the dev-mode workers.
	Handlers map[string]worker.Handler
	Logger   *slog.Logger
	// KeyFileInterval is how often the key files (http.api_keys_file,
	// http.admin_keys_file) are read to see whether they changed
	// (default DefaultKeyFileInterval).
	KeyFileInterval time.Duration
}

// Service is a running admitter.
type Service struct {
	o        Options
	log      *slog.Logger
	dev      *devnats.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	redis    redis.UniversalClient
	failover *admit.Failover
	admitter *admit.Admitter
	workers  *workerd.Pool // dev mode only
	natsDoor *door.NATSDoor
	jobs     *door.NATSJobs // spillway.job.<id>, spillway.cancel.<queue>
	http     *http.Server
	httpLn   net.Listener
	status   *jobstatus.Store
	limits   jetstream.KeyValue // the runtime overrides' bucket
	keyFiles *keyFiles          // the doors' API and admin keys, following their files
	metrics  *AdmitMetrics
	// store is the kind of bucket store decisions use: "redis" or
	// "memory" (the store label of spillway_store_errors_total).
	store   string
	reloads *prometheus.CounterVec
	// firsts writes the jobs' first status records.
	firsts *jobstatus.FirstWriter
	// instanceID routes the settles of jobs this admitter's memory store
	// decided (settle.go).
	instanceID string
	// statusDropped counts first status records not written: the
	// writer's buffer was full, or JetStream refused them (status is
	// advisory; the job itself is stored).
	statusDropped prometheus.Counter

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errc   chan error
	ensure map[string]bool // queues whose streams exist
}

// Start brings the admitter up: when it returns without error both doors
// take submissions.
func Start(ctx context.Context, o Options) (_ *Service, err error) {
	if o.Config == nil {
		return nil, errors.New("admitterd: no config")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg := o.Config
	s := &Service{o: o, log: o.Logger, errc: make(chan error, 4), ensure: map[string]bool{}}
	defer func() {
		if err != nil {
			if s.cancel != nil {
				s.cancel()
			}
			s.closeAll()
		}
	}()
	nc := cfg.NATS.NATSConfig
	if o.Dev {
		listen := cfg.NATS.Listen
		if listen == config.DefaultNATSListen && portTaken(listen) {
			// A NATS server already runs here (a system service, say):
			// dev mode must not touch it, and the default is only a
			// default, so take a free port and say which.
			s.log.Warn("dev mode: " + listen + " is taken; the embedded NATS server takes a free port (set nats.listen or --nats-listen to choose)")
			listen = "127.0.0.1:0"
		}
		if s.dev, err = devnats.Start(listen, cfg.NATS.StoreDir); err != nil {
			return nil, err
		}
		nc.URL = s.dev.URL()
		s.log.Info("dev mode: embedded NATS with JetStream", "url", nc.URL)
	}
	if s.nc, err = conn.NATS(nc, "spillway-admitter", s.log); err != nil {
		return nil, err
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	if err = s.ensureStreams(ctx, cfg); err != nil {
		return nil, err
	}
	s.publishWeights(ctx, cfg)
	s.metrics = NewAdmitMetrics(o.Registry)
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_config_reloads_total",
		Help: "Configuration reloads, by result (success, failure).",
	}, []string{"result"})
	s.statusDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_status_records_dropped_total",
		Help: "First job status records not written (the writer fell behind, or JetStream refused them); the jobs themselves are stored.",
	})
	o.Registry.MustRegister(s.reloads, s.statusDropped)
	for _, result := range []string{"success", "failure"} {
		s.reloads.WithLabelValues(result) // at 0 from the start: the first failure is an increase
	}

	var shared bucket.Store
	if cfg.Redis.Shared() {
		if s.redis, shared, err = conn.Redis(cfg.Redis.RedisConfig); err != nil {
			return nil, err
		}
		// A wrong password is not an outage for the failure mode to ride
		// out: every decision would fail (or, open, admit everything).
		if err = conn.RedisAuth(ctx, s.redis, cfg.Redis.RedisConfig); err != nil {
			return nil, err
		}
	}
	if s.failover, err = admit.NewFailover(shared, cfg.Redis.FailureMode); err != nil {
		return nil, err
	}
	s.store = "memory"
	if shared != nil {
		s.store = "redis"
	}
	s.failover.OnError = func(err error) {
		s.metrics.StoreError(s.store)
		s.log.Warn("bucket store failed; using the failure mode", "mode", s.failover.Mode(), "err", err)
	}
	s.failover.OnFallback = s.metrics.FailureMode
	s.metrics.Init(cfg, s.store)
	s.warnIPTiers(cfg)

	pub, err := queue.NewPublisher(s.js, queue.DefaultMaxInFlight)
	if err != nil {
		return nil, err
	}
	replicas := max(cfg.NATS.Replicas, 1)
	idem, err := admit.OpenIdempotency(ctx, s.js, cfg.Status.TTL, replicas, s.log)
	if err != nil {
		return nil, err
	}
	if s.status, err = jobstatus.Open(ctx, s.js, cfg.Status.TTL, replicas); err != nil {
		return nil, err
	}
	if s.firsts, err = jobstatus.NewFirstWriter(s.nc, s.log, func(n int) { s.statusDropped.Add(float64(n)) }); err != nil {
		return nil, err
	}
	if s.instanceID, err = admit.NewInstanceID(); err != nil {
		return nil, err
	}
	settled, err := openSettleKV(ctx, s.js, cfg.Status.TTL, replicas)
	if err != nil {
		return nil, err
	}
	debounce, err := admit.OpenDebounce(ctx, s.js, debounceTTL(cfg), replicas, superseder{s.status})
	if err != nil {
		return nil, err
	}
	if s.admitter, err = admit.New(cfg, admit.Options{
		JS: s.js, Publisher: pub, Store: s.failover, Idempotency: idem, Observe: s.metrics.Observe, Logger: s.log,
		OnStored: s.recordStored, OnBatchStored: s.recordBatch, InstanceID: s.instanceID, SettleKV: settled,
		Debounce: debounce,
	}); err != nil {
		return nil, err
	}
	if err = s.startSettle(o.Registry, shared != nil); err != nil {
		return nil, err
	}
	inspector := admin.NewInspector(s.js) // one snapshot of the queues for /metrics and GET /v1/queues
	o.Registry.MustRegister(newQueueCollector(inspector, s.admitter.Config, s.log), newFailureModeCollector(s.failover))
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if s.limits, err = s.followOverrides(ctx, runCtx, replicas); err != nil {
		return nil, err
	}

	if s.keyFiles, err = newKeyFiles(cfg, s.log, o.Registry); err != nil {
		return nil, err
	}
	keys, adminKeys := s.keyFiles.apiKeys(), s.keyFiles.adminKeys()
	s.warnOpenListen(cfg)
	s.httpLn, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTP.Listen)
	if err != nil {
		return nil, fmt.Errorf("admitterd: http.listen %s: %w (set http.listen or SPILLWAY_HTTP_LISTEN)", cfg.HTTP.Listen, err)
	}
	s.http = &http.Server{
		Handler: door.NewHTTP(door.HTTPOptions{
			Admitter: s.admitter, JS: s.js, Status: s.status, Inspector: inspector, Keys: keys, AdminKeys: adminKeys, Ready: s.Ready, Logger: s.log,
			Limits:     s.limits,
			Metrics:    promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}),
			UI:         ui.Handler(),
			Registerer: o.Registry,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		// A client that announces a body and never sends it holds a
		// connection no longer than this. Writing an answer is bounded by
		// the door, per answer (http.write_timeout).
		ReadTimeout:    30 * time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	access := door.NATSAccess{Keys: keys, AdminKeys: adminKeys, ReplyPrefix: cfg.NATS.ReplyPrefix, Dropped: s.metrics.NATSDropped}
	s.natsDoor = door.NewNATS(s.nc, s.admitter, s.log)
	s.natsDoor.Access = access
	if err = s.natsDoor.Start(); err != nil {
		return nil, err
	}
	s.jobs = door.NewNATSJobs(s.nc, s.js, s.admitter, s.status, s.log)
	s.jobs.Access = access
	if err = s.jobs.Start(); err != nil {
		return nil, err
	}

	s.goRun(func() error { return s.admitter.Run(runCtx) })
	s.goRun(func() error { return s.keyFiles.run(runCtx, cmp.Or(o.KeyFileInterval, DefaultKeyFileInterval)) })
	s.goRun(func() error { return s.firsts.Run(runCtx) })
	s.goRun(func() error {
		if err := s.http.Serve(s.httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if o.Dev {
		rec := jobstatus.NewRecorder(s.status, s.log, 4096)
		rec.SetRecordRunning(cfg.Status.RecordRunning)
		s.goRun(func() error { return rec.Run(runCtx) })
		if s.workers, err = workerd.Start(runCtx, workerd.Options{
			NC: s.nc, JS: s.js, Config: cfg, PacerStore: shared, Handlers: o.Handlers,
			Recorder: rec, Registerer: o.Registry, Logger: s.log,
		}); err != nil {
			return nil, err
		}
		s.goRun(s.workers.Wait)
	}
	s.log.Info("admitter ready", "http", s.HTTPAddr(), "nats", conn.Redact(nc.URL), "queues", len(cfg.Queues))
	return s, nil
}

func (s *Service) goRun(f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil {
			select {
			case s.errc <- err:
			default:
			}
		}
	}()
}

// HTTPAddr is the address the HTTP door listens on.
func (s *Service) HTTPAddr() string { return s.httpLn.Addr().String() }

// NATSURL is the NATS server the admitter uses (the embedded one in dev mode).
func (s *Service) NATSURL() string { return conn.Redact(s.nc.ConnectedUrl()) }

// Err delivers the first failure of a part that should run until Shutdown.
func (s *Service) Err() <-chan error { return s.errc }

// Ready reports why the admitter cannot take jobs now, or nil.
func (s *Service) Ready() error {
	if !s.nc.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", s.nc.Status())
	}
	// The failure mode in force, which a reload may have changed.
	if s.failover.Mode() == config.FailClosed {
		if down, _ := s.failover.Down(); down {
			return errors.New("the bucket store is unreachable and redis.failure_mode is closed")
		}
	}
	return nil
}

// Reload applies a new configuration: streams of new or changed queues
// are created or updated first, then the admitter switches, and with it
// the failure mode (redis.failure_mode) and readiness, then — in dev mode —
// the in-process workers take it (workerd.Pool.Reload: leak rates, queues,
// handlers, retry policies, concurrency). The key files follow the new
// configuration whatever else happens (ReloadKeys). The store's connection
// (redis.url, redis.timeout) is not reloaded: a restart applies it.
func (s *Service) Reload(ctx context.Context, cfg *config.Config) error {
	if s.admitter.Config().HTTP.APIKeysFile != "" && cfg.HTTP.APIKeysFile == "" {
		s.warnOpenListen(cfg) // the listener stays; its keys go
	}
	s.keyFiles.configure(cfg)
	if err := s.ensureStreams(ctx, cfg); err != nil {
		s.reloads.WithLabelValues("failure").Inc()
		return err
	}
	if err := s.failover.SetMode(cfg.Redis.FailureMode); err != nil {
		s.reloads.WithLabelValues("failure").Inc()
		return err
	}
	if old := s.admitter.Config().Redis; !old.SameConnection(cfg.Redis.RedisConfig) {
		s.log.Warn("redis.url, sentinel, cluster, credentials, tls and timeout take effect at the next start; the admitter keeps its bucket store")
	}
	s.admitter.SetConfig(cfg)
	s.publishWeights(ctx, cfg)
	s.metrics.Init(cfg, s.store)
	s.warnIPTiers(cfg)
	if s.workers != nil {
		if err := s.workers.Reload(cfg); err != nil {
			s.reloads.WithLabelValues("failure").Inc()
			return fmt.Errorf("admitterd: the admitter runs the new configuration, but its workers keep the previous one: %w", err)
		}
	}
	s.reloads.WithLabelValues("success").Inc()
	return nil
}

// warnIPTiers warns of each ip tier of cfg: the NATS door, which every
// admitter runs, knows no client address and answers such a queue's
// submissions 400 bad-key.
func (s *Service) warnIPTiers(cfg *config.Config) {
	for _, q := range cfg.Queues {
		for _, l := range q.Limits {
			if l.Key.Kind == config.KeyIP && !l.Shadow() { // a shadow tier refuses nothing
				s.log.Warn("a limit tier keys on the client's IP address: the NATS door knows none and answers this queue's submissions 400 bad-key; submit over HTTP",
					"queue", q.Name, "tier", l.Name)
			}
		}
	}
}

// ReloadKeys reads the key files again now (main calls it on SIGHUP) and
// logs what it found, changed or not. The files are also read every
// Options.KeyFileInterval; a file that cannot be read or parsed keeps the
// running keys.
func (s *Service) ReloadKeys() { s.keyFiles.check(true) }

// ReloadFailed counts a reload whose configuration was invalid.
func (s *Service) ReloadFailed() { s.reloads.WithLabelValues("failure").Inc() }

func (s *Service) ensureStreams(ctx context.Context, cfg *config.Config) error {
	for _, q := range cfg.Queues {
		c := q.Backlog
		if c.Replicas == 0 {
			c.Replicas = cfg.NATS.Replicas
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := queue.EnsureStreams(sctx, s.js, c)
		cancel()
		if err != nil {
			return fmt.Errorf("admitterd: streams of queue %s: %w", q.Name, err)
		}
	}
	return nil
}

// recordStored hands a queued job's first status record to the writer;
// it never blocks a submission. An admitted job gets none: the job in
// READY is its status until a worker writes its outcome
// (jobstatus.Locator), so admitting it stores the job and nothing else.
func (s *Service) recordStored(j *queue.Job, st spillway.Status, at queue.Stored) {
	if st != spillway.Queued {
		return
	}
	s.firsts.Add(jobstatus.FirstRecord(j, spillway.State(st), at))
}

// recordBatch hands the first status records of a batch's queued jobs
// to the writer, to be written together; it never blocks a submission.
// Its admitted jobs get none, as recordStored's.
func (s *Service) recordBatch(jobs []admit.StoredJob) {
	var recs []jobstatus.Record
	for _, j := range jobs {
		if j.Status == spillway.Queued {
			recs = append(recs, jobstatus.FirstRecord(j.Job, spillway.State(j.Status), j.At))
		}
	}
	if len(recs) > 0 {
		s.firsts.AddBatch(recs)
	}
}

// Shutdown stops taking submissions, answers those received, and closes
// everything, within ctx.
func (s *Service) Shutdown(ctx context.Context) error {
	var errs []error
	if s.natsDoor != nil {
		errs = append(errs, s.natsDoor.Stop(ctx))
	}
	if s.jobs != nil {
		errs = append(errs, s.jobs.Stop(ctx))
	}
	if s.http != nil {
		errs = append(errs, s.http.Shutdown(ctx))
	}
	if s.cancel != nil {
		s.cancel()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("admitterd: workers still stopping: %w", ctx.Err()))
	}
	s.closeAll()
	return errors.Join(errs...)
}

func (s *Service) closeAll() {
	if s.nc != nil {
		_ = s.nc.Drain()
		for i := 0; i < 200 && !s.nc.IsClosed(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		s.nc.Close()
	}
	if s.redis != nil {
		_ = s.redis.Close()
	}
	if s.dev != nil {
		s.dev.Shutdown()
	}
}

// portTaken reports whether something accepts connections at addr.
func portTaken(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// loadOverridesTimeout bounds how long a starting admitter waits for the
// runtime overrides stored in JetStream.
const loadOverridesTimeout = 30 * time.Second

// followOverrides opens the runtime overrides' bucket and follows it
// until runCtx ends, each change applied to the admitter; it returns once
// the overrides stored at the start are in force (or ctx ends), so that
// no submission is decided without them.
func (s *Service) followOverrides(ctx, runCtx context.Context, replicas int) (jetstream.KeyValue, error) {
	kv, err := overrides.Open(ctx, s.js, replicas)
	if err != nil {
		return nil, err
	}
	w := overrides.NewWatcher(kv, s.log)
	w.OnChange = s.admitter.SetRuntimeOverrides
	s.goRun(func() error { return w.Run(runCtx) })
	select {
	case <-w.Loaded():
	case <-ctx.Done():
		return nil, fmt.Errorf("admitterd: loading the runtime limit and concurrency overrides: %w", ctx.Err())
	case <-time.After(loadOverridesTimeout):
		// Deciding without them would give overridden keys their tier's
		// limit: better not to start, and say why.
		return nil, fmt.Errorf("admitterd: the runtime limit and concurrency overrides (JetStream KV bucket %s) were not read within %v; is JetStream reachable?", overrides.Bucket, loadOverridesTimeout)
	}
	if n := len(w.Records()); n > 0 {
		s.log.Info("runtime limit and concurrency overrides loaded", "overrides", n)
	}
	return kv, nil
}
