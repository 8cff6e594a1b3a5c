package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// Handler runs one job. Returning nil marks it done; an error retries it
// on the Retry policy's schedule, retry.After(err, d) no sooner than d, and
// retry.Permanent(err) sends it to the dead-letter stream at once. A panic
// counts as an error. ctx ends when the worker's grace period at stop runs
// out. j.Attempt is this try's number, from 1.
type Handler func(ctx context.Context, j *queue.Job) error

// ReadyConsumer is the durable consumer of a queue's READY stream, shared
// by every worker.
const ReadyConsumer = "spillway-ready"

// Defaults of a WorkerConfig's zero fields.
const (
	DefaultConcurrency = 16
	DefaultAckWait     = 30 * time.Second
	DefaultGracePeriod = 30 * time.Second
	// DefaultFetchWait is how long one pull request waits for jobs. It
	// bounds how long a stopping worker keeps pulling.
	DefaultFetchWait = time.Second
)

// WorkerConfig configures a Worker. Every zero field takes its default.
type WorkerConfig struct {
	// Queue is the queue to work. Its streams are created or updated
	// (queue.EnsureStreams) when Run starts; its LeakRate is required.
	Queue queue.Config
	// Concurrency is how many handlers run at once in this worker,
	// admitted and backlog jobs together (default 16).
	Concurrency int
	// Retry is the retry schedule and the number of tries (retry.Policy's
	// defaults: 5 tries, 1s doubling to 5m, 20% jitter).
	Retry retry.Policy
	// Pacer spaces backlog starts at Queue.LeakRate. Default: a pacer in
	// this process's memory, which paces this worker alone — workers in
	// several processes must share one (pace.NewKVPacer in JetStream, pace.NewPacer
	// over a redisbucket.Store, or pace.NewFailoverPacer over both, within a
	// NewYieldingPacer so that pushback pauses them all) or each drains at
	// the full leak rate. A handler's pushback (retry.Pushback) is told to
	// a pace.Pacer that is a pace.Yielder (the default is one) and ignored by others.
	Pacer pace.Pacer
	// AckWait is how long JetStream waits for an ack before it hands a job
	// to another worker (default 30s). Running jobs, and backlog grants
	// waiting for their start, are kept alive with heartbeats every
	// AckWait/3, so it only bounds how long a crashed worker's jobs wait.
	AckWait time.Duration
	// MaxAckPending bounds the ready consumer's delivered, unacknowledged
	// jobs across all workers — running or waiting for a retry (default:
	// the larger of 1000 and 64×Concurrency; a worker never lowers what
	// another set). When it is reached JetStream delivers nothing more
	// until some settle; the worker logs a warning when that happens.
	MaxAckPending int
	// GracePeriod is how long running handlers may finish after Run's
	// context ends (default 30s). Then their context is canceled and
	// whatever has not finished is handed back to JetStream.
	GracePeriod time.Duration
	// FetchWait is how long one pull request waits (default 1s).
	FetchWait time.Duration
	// Rand is the jitter source for retries (default: math/rand/v2's).
	Rand retry.Source
	// Logger receives warnings and errors (default slog.Default()).
	Logger *slog.Logger
	// Observe, if set, is called for every step of every job (Event). It
	// runs on the worker's goroutines and must not block.
	Observe func(Event)
	// StartGate, if set, is asked before a backlog job's first try starts,
	// after its booked start came, with the Started event the try will
	// have (docs/design.md#cancel). It must record the start durably
	// before it returns nil, so that a cancel that comes later sees it;
	// it returns ErrJobCancelled for a job that was cancelled, and the
	// worker deletes the job's backlog message and runs nothing. Any other
	// error hands the grant back, to start again a second later. Nil: every
	// job starts, and a cancel cannot be told whether it came in time.
	StartGate func(ctx context.Context, e Event) error
	// Outcome, if set, is given a READY job's outcome — its Succeeded or
	// DeadLettered event — before the job leaves READY (its ack, after a
	// dead letter's copy to DEAD), so that a reader who looks for the job
	// in READY and then in what Outcome wrote finds it in one of them. It
	// is called on the job's goroutine and delays the ack by its own
	// time; an error is logged and the job settled all the same. The
	// event is also observed (Observe) afterwards, as every event is.
	Outcome func(ctx context.Context, e Event) error
	// SettleCost, if set, is given a job whose handler succeeded and
	// reported what the job really cost (queue.Job.SetCostActual, or
	// spillway.HeaderCostActual in an HTTP or NATS handler's answer), with
	// that cost, before its outcome is recorded (Outcome) and the job
	// acked: once the job is seen done its cost is settled. It is called
	// on the job's goroutine and delays the ack by its own time; an error
	// is logged and the job settled all the same — settling a cost never
	// holds or loses a job. Nil: reported costs are ignored.
	SettleCost func(ctx context.Context, j *queue.Job, actual int64) error
	// KeyPauses follows the queue's paused keys when its pushback scope
	// is key (Queue.Pushback, docs/design.md#pushback); ignored otherwise.
	// Default: one of this worker's own. Workers of one queue in a process
	// may share one, whose Pauses counts them all.
	KeyPauses *pace.KeyPauses
}

// EventKind is a step in a job's life in a worker.
type EventKind uint8

const (
	// Released: a backlog job's booked start came and its handler starts
	// now, in this worker, run from its backlog message (Started follows).
	Released EventKind = iota
	// Started: the handler was called.
	Started
	// Succeeded: the handler returned nil and JetStream confirmed the ack.
	Succeeded
	// Retrying: the handler failed; the job comes back after Event.Delay.
	Retrying
	// DeadLettered: the job is stored in the dead-letter stream and gone
	// from its source.
	DeadLettered
	// HandedBack: the worker stopped before the job finished; JetStream
	// will deliver it again.
	HandedBack
	// KeyWaiting: the job's key is at its concurrency max
	// (docs/design.md#per-key-concurrency). A READY job waits in the
	// worker (KeyWaited follows); a backlog job's grant goes back.
	KeyWaiting
	// KeyWaited: a READY job that waited for a key slot holds it now, or
	// the worker stopped first.
	KeyWaited
	// KeyMoved: a READY job whose key is at its max went to READY's tail,
	// due after Event.Delay, as this worker held as many jobs waiting as
	// it may (docs/design.md#per-key-concurrency). Not a try.
	KeyMoved
)

var eventNames = [...]string{"released", "started", "succeeded", "retrying", "dead_lettered", "handed_back",
	"key_waiting", "key_waited", "key_moved"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one step of a job. Job is nil only for a message that is not a
// job (it is dead-lettered with reason "invalid job").
type Event struct {
	Kind    EventKind
	Queue   string
	Job     *queue.Job
	Attempt int
	// Stream and Sequence are the job's place: the READY stream for an
	// admitted job or a retry; the BACKLOG stream for a backlog job, from
	// its release to the end of its first try (Released, Started, then
	// Succeeded, Retrying, DeadLettered or HandedBack). A worker runs a
	// place at most once at a time, so the pair identifies a running job.
	Stream   string
	Sequence uint64
	// Err is the handler's error (Retrying, DeadLettered).
	Err error
	// Reason is why a job is dead (DeadLettered).
	Reason string
	// Delay is the wait before the next try (Retrying).
	Delay time.Duration
	// Took is how long the handler ran (Succeeded, Retrying,
	// DeadLettered after a try).
	Took time.Duration
	// Waited is how long a backlog job waited since it was enqueued, to
	// its start (Released).
	Waited time.Duration
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = max(1000, 64*c.Concurrency)
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.FetchWait == 0 {
		c.FetchWait = DefaultFetchWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Rand == nil {
		c.Rand = globalRand{}
	}
	return c
}

// Validate reports the first field that cannot be used, naming it.
func (c WorkerConfig) Validate() error {
	if err := c.Queue.Validate(); err != nil {
		return err
	}
	q := c.Queue.Name
	switch {
	case c.Queue.LeakRate.Count == 0:
		return fmt.Errorf("%w: queue %s: leak_rate is not set: the backlog would never drain (want COUNT/UNIT such as 50/s)", queue.ErrInvalidConfig, q)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: queue %s: concurrency %d: must be ≥ 1", queue.ErrInvalidConfig, q, c.Concurrency)
	case c.AckWait < 0 || (c.AckWait > 0 && c.AckWait < 300*time.Millisecond):
		return fmt.Errorf("%w: queue %s: ack_wait %v: must be at least 300ms", queue.ErrInvalidConfig, q, c.AckWait)
	case c.MaxAckPending < 0:
		return fmt.Errorf("%w: queue %s: max_ack_pending %d: must be ≥ 1", queue.ErrInvalidConfig, q, c.MaxAckPending)
	case c.MaxAckPending > 0 && c.MaxAckPending < c.withDefaults().Concurrency:
		return fmt.Errorf("%w: queue %s: max_ack_pending %d is below concurrency %d: handlers would sit idle", queue.ErrInvalidConfig, q, c.MaxAckPending, c.withDefaults().Concurrency)
	case c.GracePeriod < 0:
		return fmt.Errorf("%w: queue %s: grace_period %v: must be positive", queue.ErrInvalidConfig, q, c.GracePeriod)
	case c.FetchWait < 0 || (c.FetchWait > 0 && c.FetchWait < 10*time.Millisecond):
		return fmt.Errorf("%w: queue %s: fetch_wait %v: must be at least 10ms", queue.ErrInvalidConfig, q, c.FetchWait)
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("%w: queue %s: retry: %w", queue.ErrInvalidConfig, q, err)
	}
	return nil
}

// Worker runs one queue's jobs: admitted jobs from READY as fast as its
// concurrency allows, and queued jobs from the BACKLOG at the leak rate,
// never before their not-before and in FIFO order per key. Several workers
// — in one process or many — share a queue's work.
type Worker struct {
	js     jetstream.JetStream
	cfg    WorkerConfig
	handle Handler
	log    *slog.Logger
}

// NewWorker returns a worker for cfg.Queue that runs h. Nothing happens
// until Run.
func NewWorker(js jetstream.JetStream, cfg WorkerConfig, h Handler) (*Worker, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", queue.ErrInvalidConfig)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: queue %s: nil handler", queue.ErrInvalidConfig, cfg.Queue.Name)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Queue = cfg.Queue.WithDefaults()
	if cfg.Pacer == nil {
		mem, err := bucket.NewMemory()
		if err != nil {
			return nil, fmt.Errorf("worker: pacer store: %w", err)
		}
		sp, err := pace.NewPacer(mem, cfg.Queue.Name, cfg.Queue.LeakRate)
		if err != nil {
			return nil, err
		}
		if cfg.Pacer, err = pace.NewYieldingPacer(sp, nil, cfg.Queue.Name, cfg.Queue.LeakRate, cfg.Queue.Adaptive); err != nil {
			return nil, err
		}
	}
	return &Worker{js: js, cfg: cfg, handle: h, log: cfg.Logger.With("queue", cfg.Queue.Name)}, nil
}

// Run works the queue until ctx ends, then stops gracefully: it stops
// pulling, lets running handlers finish within the grace period, and hands
// everything else back to JetStream for another worker. It returns nil
// after a graceful stop — ctx ending while it starts is one too: nothing
// was pulled yet — or the error that kept it from starting. While the
// NATS cluster cannot take its setup for now (clusterUnready: a server
// down or not yet known, no JetStream meta leader), it waits and tries
// again.
func (w *Worker) Run(ctx context.Context) error {
	ready, streams, err := w.tryStart(ctx)
	for failures := 1; err != nil && clusterUnready(ctx, err, w.js.Conn().LastError()); failures++ {
		w.log.Warn("the NATS cluster cannot set up the queue's streams and buckets yet; trying again", "error", err, "failures", failures)
		if loop.Sleep(ctx, loop.Backoff(failures)) != nil {
			return nil
		}
		ready, streams, err = w.tryStart(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// Handlers get a context of their own: it outlives ctx by the grace
	// period.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	// The pause state (docs/design.md#pause) is followed while Run runs.
	// READY jobs and backlog starts share the handler slots.
	pause, slots := pace.NewPauser(), newSlots(w.cfg.Concurrency)
	p := parts{cfg: w.cfg, js: w.js, pause: pause, slots: slots, log: w.log, observe: w.observe}
	if streams.keys != nil {
		p.keys = newKeyWaits(streams.keys, w.cfg)
	}
	// The fairness weights in force reach the jobs that wait: the
	// leader weighs a flow when it picks it. Until the admitters' entry
	// is read (or while there is none) the queue's own weights apply.
	p.weights = pace.NewWeights(w.cfg.Queue.Fairness)
	if streams.keyPauseKV != nil {
		p.keyPauses, p.keyPauseKV = w.cfg.KeyPauses, streams.keyPauseKV
		if p.keyPauses == nil {
			p.keyPauses = pace.NewKeyPauses()
		}
	}
	r := newRunner(ctx, hctx, p, w.handle, ready)
	defer r.keep.stop()
	d := newDrainer(p, streams, r)

	var loops sync.WaitGroup
	// The pause state is known before the first pull (the watch's first
	// values), so that a worker started while its queue is paused starts
	// nothing.
	watching := make(chan struct{})
	loops.Go(func() { pause.Run(ctx, streams.kv, w.cfg.Queue.Name, w.log, watching) })
	loops.Go(func() { p.weights.Run(ctx, streams.kv, w.cfg.Queue.Name, w.log) })
	if p.keyPauses != nil {
		// The keys paused before this worker began are known before its
		// first pull, as the pause state is.
		keysKnown := make(chan struct{})
		loops.Go(func() { p.keyPauses.Run(ctx, streams.keyPauseKV, w.cfg.Queue.Name, w.log, keysKnown) })
		select {
		case <-keysKnown:
		case <-ctx.Done():
		case <-time.After(requestTimeout):
			w.log.Warn("the queue's paused keys are not known yet; working until the watch tells them", "after", requestTimeout)
		}
	}
	select {
	case <-watching:
	case <-ctx.Done():
	case <-time.After(requestTimeout):
		w.log.Warn("the queue's pause state is not known yet; working until the watch tells it", "after", requestTimeout)
	}
	loops.Go(func() { r.pull(ctx) })
	loops.Go(func() { d.run(ctx) })
	<-ctx.Done()
	loops.Wait() // no more pulls or backlog starts; the drainer has handed back the grants it had not started

	grace := time.NewTimer(w.cfg.GracePeriod)
	defer grace.Stop()
	select {
	case <-r.idle():
		return nil
	case <-grace.C:
	}
	w.log.Warn("grace period over: canceling running handlers and handing their jobs back",
		"grace_period", w.cfg.GracePeriod, "running", r.running())
	r.handBackAll(cancelHandlers)
	return nil
}

// start makes sure of the queue's streams and the workers' consumers.
func (w *Worker) start(ctx context.Context) (ready jetstream.Consumer, d drainStreams, err error) {
	if err = queue.EnsureStreams(ctx, w.js, w.cfg.Queue); err != nil {
		return nil, d, err
	}
	if ready, err = w.readyConsumer(ctx); err != nil {
		return nil, d, err
	}
	gname := queue.GrantsStreamName(w.cfg.Queue.Name)
	if d.grants, err = w.ensureConsumer(ctx, gname, jetstream.ConsumerConfig{
		Durable:       GrantsConsumer,
		Description:   "Spillway workers: backlog jobs whose start the drain's leader booked",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: -1, // bounded by the workers' handlers: each takes one grant per free one
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		return nil, d, err
	}
	// Opened after EnsureStreams, so its gets are direct: a job's at its
	// start, the leader's; a "no such message" is confirmed by the
	// stream's leader (queue.Stream).
	if d.backlog, err = queue.Stream(ctx, w.js, queue.StreamName(w.cfg.Queue.Name, queue.Backlog)); err != nil {
		return nil, d, fmt.Errorf("worker: stream %s: %w", queue.StreamName(w.cfg.Queue.Name, queue.Backlog), err)
	}
	if d.gstream, err = w.js.Stream(ctx, gname); err != nil {
		return nil, d, fmt.Errorf("worker: stream %s: %w", gname, err)
	}
	if d.kv, err = pace.OpenPacerBucket(ctx, w.js, w.cfg.Queue.Replicas); err != nil {
		return nil, d, err
	}
	if d.keys, err = keyslots.OpenBucket(ctx, w.js, w.cfg.Queue.Replicas); err != nil {
		return nil, d, err
	}
	if w.cfg.Queue.Pushback == queue.PushbackKey {
		if d.keyPauseKV, err = pace.OpenKeyPushbackBucket(ctx, w.js, w.cfg.Queue.Replicas); err != nil {
			return nil, d, err
		}
	}
	return ready, d, nil
}

// tryStart sets the queue up (start) within startTimeout: a request that
// reached a server as it went down is never answered, and ctx may have no
// deadline, or a far one.
func (w *Worker) tryStart(ctx context.Context) (jetstream.Consumer, drainStreams, error) {
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return w.start(sctx)
}

// startTimeout bounds one try of a worker's setup: some ten JetStream
// requests, each a stream's or consumer's creation in the worst case,
// which a loaded cluster takes seconds to replicate.
const startTimeout = 15 * time.Second

// clusterUnready reports whether err, from a JetStream request made with
// ctx (still alive), says the cluster cannot answer it now but may soon: a
// new replicated stream that has no place while a server is down or not
// yet known (placement's "peer offline", alone: a placement refused for a
// tag or for storage as well stays refused), JetStream unavailable for
// the moment (no meta leader) or not led, or no answer in time — unless
// the connection's last error (connErr) is a permissions violation, which
// leaves a request unanswered for good. A configuration the cluster
// refuses for good is none of these, nor is "no responders": a server
// without JetStream.
func clusterUnready(ctx context.Context, err, connErr error) bool {
	if ctx.Err() != nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsClusterNotAvailable, jsClusterNotLeader:
			return true
		}
		return apiErr.ErrorCode == jsClusterNoPeers && apiErr.Description == placementPeerOffline
	}
	if errors.Is(connErr, nats.ErrPermissionViolation) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// placementPeerOffline is the whole of a placement's refusal when its only
// reason is a server down or not yet heard from.
const placementPeerOffline = "no suitable peers for placement, peer offline"

// JetStream's error codes of a cluster that cannot take a request now.
const (
	jsClusterNoPeers      jetstream.ErrorCode = 10005 // no suitable peers for placement
	jsClusterNotAvailable jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	jsClusterNotLeader    jetstream.ErrorCode = 10009 // JetStream cluster can not handle request
)

// parts are what the worker hands the two loops it runs, the runner
// (READY) and the drainer (the backlog): its configuration and what both
// of them work with.
type parts struct {
	cfg        WorkerConfig
	js         jetstream.JetStream
	pause      *pace.Pauser // the queue's pause state, followed while Run runs
	slots      *slots       // the handler slots, shared by READY jobs and backlog starts
	keys       *keyWaits    // the key slots of per-key concurrency (keywait.go)
	log        *slog.Logger
	observe    func(Event)
	keyPauses  *pace.KeyPauses // the paused keys (pushback scope key), or nil
	keyPauseKV jetstream.KeyValue
	weights    *pace.Weights // the fairness weights in force, followed while Run runs
}

// drainStreams are the JetStream handles the drain works with.
type drainStreams struct {
	grants     jetstream.Consumer // the workers' consumer of the GRANTS stream
	backlog    jetstream.Stream
	gstream    jetstream.Stream   // GRANTS
	kv         jetstream.KeyValue // the pacers' bucket: the lease, the pause, the releases per key
	keys       jetstream.KeyValue // the key slots' bucket (keyslots)
	keyPauseKV jetstream.KeyValue // the keys' pauses (pushback scope key), or nil
}

// readyConsumer creates or updates the ready consumer. MaxAckPending only
// grows: workers with different concurrency settings do not take turns
// shrinking it under each other.
func (w *Worker) readyConsumer(ctx context.Context) (jetstream.Consumer, error) {
	stream := queue.StreamName(w.cfg.Queue.Name, queue.Ready)
	pending := w.cfg.MaxAckPending
	if c, err := w.js.Consumer(ctx, stream, ReadyConsumer); err == nil {
		pending = max(pending, c.CachedInfo().Config.MaxAckPending)
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("worker: consumer %s on %s: %w", ReadyConsumer, stream, err)
	}
	return w.ensureConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       ReadyConsumer,
		Description:   "Spillway workers: admitted jobs and retries",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxDeliver:    -1, // the worker dead-letters; JetStream never drops
		MaxAckPending: pending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
}

func (w *Worker) ensureConsumer(ctx context.Context, stream string, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := w.js.CreateOrUpdateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("worker: consumer %s on %s: %w", cc.Durable, stream, err)
	}
	return c, nil
}

// observe reports e if the worker has an observer.
func (w *Worker) observe(e Event) {
	if w.cfg.Observe != nil {
		e.Queue = w.cfg.Queue.Name
		w.cfg.Observe(e)
	}
}

// globalRand is math/rand/v2's top-level source, safe for concurrent use.
type globalRand struct{}

func (globalRand) Int64N(n int64) int64 { return rand.Int64N(n) }
