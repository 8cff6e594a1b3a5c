package workerd

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// metrics are the worker metrics, fed by queue.Events.
type metrics struct {
	completed *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	wait      *prometheus.HistogramVec
	inFlight  *prometheus.GaugeVec
	dead      *prometheus.CounterVec
	expired   *prometheus.CounterVec
	leak      *prometheus.GaugeVec
	// Per-key concurrency (docs/design.md#per-key-concurrency): by queue
	// only, never by key.
	keyWaits   *prometheus.CounterVec
	keyWaiting *prometheus.GaugeVec
	keyMoves   *prometheus.CounterVec

	mu      sync.Mutex
	running map[runKey]struct{}            // started and not yet ended, so the gauge never drifts
	pacers  map[string]*pace.YieldingPacer // the queues worked here, for leakCollector
	keys    map[string]*pace.KeyPauses     // the queues with pushback scope key, for keyPauseCollector
}

// leakCollector reports each queue's current leak rate and the pauses
// this process began, read from its pacer at scrape time (no I/O: the
// pacer's last reading of the shared state, and the rate as a function of
// the time).
type leakCollector struct {
	m             *metrics
	current, paus *prometheus.Desc
}

func (c leakCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.current; ch <- c.paus }

func (c leakCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for q, p := range c.m.pacers {
		milli, _ := p.Current()
		ch <- prometheus.MustNewConstMetric(c.current, prometheus.GaugeValue, float64(milli)/1000, q)
		ch <- prometheus.MustNewConstMetric(c.paus, prometheus.CounterValue, float64(p.Pauses()), q)
	}
}

// runKey is a run's message: a backlog job's first try runs from the
// backlog stream, so a sequence alone can name two runs at once.
type runKey struct {
	queue  string
	stream string
	seq    uint64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_jobs_completed_total",
			Help: "Handler runs that ended, by queue and result (succeeded, retrying, dead).",
		}, []string{"queue", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spillway_job_duration_seconds",
			Help:    "How long handlers ran, by queue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"queue"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spillway_job_wait_seconds",
			Help:    "How long backlog jobs waited from enqueue to release, by queue.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"queue"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_jobs_in_flight",
			Help: "Handlers running now in this process, by queue.",
		}, []string{"queue"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_dead_letters_total",
			Help: "Jobs moved to the dead-letter stream, by queue.",
		}, []string{"queue"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_jobs_expired_total",
			Help: "Backlog jobs dead-lettered unrun because their expiry (Spillway-Max-Wait) came before their release, by queue.",
		}, []string{"queue"}),
		leak: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_leak_rate",
			Help: "The backlog's configured leak rate in jobs per second, by queue.",
		}, []string{"queue"}),
	}
	m.keyWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_concurrency_waits_total",
		Help: "Jobs that found their key at its concurrency max, by queue and source: ready (it waits in the worker) or backlog (its grant goes back for a later start).",
	}, []string{"queue", "source"})
	m.keyWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "spillway_concurrency_waiting",
		Help: "READY jobs waiting in this process for a slot of their key's concurrency max, by queue.",
	}, []string{"queue"})
	reg.MustRegister(m.keyWaits, m.keyWaiting)
	m.keyMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_concurrency_moves_total",
		Help: "READY jobs moved to READY's tail, unrun and without spending a try, because their key was at its concurrency max while this process held as many jobs waiting as it may, by queue.",
	}, []string{"queue"})
	reg.MustRegister(m.keyMoves)
	m.running = make(map[runKey]struct{})
	m.pacers = make(map[string]*pace.YieldingPacer)
	lc := leakCollector{m: m,
		current: prometheus.NewDesc("spillway_leak_rate_current",
			"The backlog's leak rate now in jobs per second, by queue: the configured one, or less while an adaptive leak climbs back after a pushback.",
			[]string{"queue"}, nil),
		paus: prometheus.NewDesc("spillway_leak_pauses_total",
			"Pauses of the backlog's leak this process began because a handler's downstream pushed back (429, 503, busy), by queue.",
			[]string{"queue"}, nil),
	}
	reg.MustRegister(m.completed, m.duration, m.wait, m.inFlight, m.dead, m.expired, m.leak, lc)
	m.keys = make(map[string]*pace.KeyPauses)
	reg.MustRegister(newKeyPauseCollector(m))
	return m
}

// setLeak sets queue q's configured leak rate and the pacer its current
// rate and pauses are read from (nil: none yet).
func (m *metrics) setLeak(q string, r bucket.Rate, p *pace.YieldingPacer) {
	if m == nil || r.Count <= 0 {
		return
	}
	m.leak.WithLabelValues(q).Set(float64(r.Count) / r.Per.Seconds())
	if p != nil {
		m.mu.Lock()
		m.pacers[q] = p
		m.mu.Unlock()
	}
}

// initQueue starts queue q's series at 0 before its first event, so that
// rate() and alert rules (dead letters growing) see 0 rather than nothing.
func (m *metrics) initQueue(q string) {
	if m == nil {
		return
	}
	for _, result := range []string{"succeeded", "retrying", "dead"} {
		m.completed.WithLabelValues(q, result)
	}
	m.duration.WithLabelValues(q)
	m.wait.WithLabelValues(q)
	m.inFlight.WithLabelValues(q)
	m.dead.WithLabelValues(q)
	m.expired.WithLabelValues(q)
}

// dropLeak removes the leak rate of a queue no longer worked here.
func (m *metrics) dropLeak(q string) {
	if m == nil {
		return
	}
	m.leak.DeleteLabelValues(q)
	m.mu.Lock()
	delete(m.pacers, q)
	m.mu.Unlock()
}

func (m *metrics) observe(e worker.Event) {
	if m == nil {
		return
	}
	switch e.Kind {
	case worker.Started:
		m.mu.Lock()
		m.running[runKey{e.Queue, e.Stream, e.Sequence}] = struct{}{}
		m.mu.Unlock()
		m.inFlight.WithLabelValues(e.Queue).Inc()
	case worker.Succeeded:
		m.ran(e, "succeeded")
	case worker.Retrying:
		m.ran(e, "retrying")
	case worker.DeadLettered:
		if e.Took > 0 {
			m.ran(e, "dead")
		}
		m.dead.WithLabelValues(e.Queue).Inc()
		if e.Reason == queue.ReasonExpired {
			m.expired.WithLabelValues(e.Queue).Inc()
		}
	case worker.Released:
		m.wait.WithLabelValues(e.Queue).Observe(e.Waited.Seconds())
	case worker.HandedBack:
		m.ended(e)
	case worker.KeyWaiting:
		if e.Stream == queue.StreamName(e.Queue, queue.Backlog) {
			m.keyWaits.WithLabelValues(e.Queue, "backlog").Inc()
		} else {
			m.keyWaits.WithLabelValues(e.Queue, "ready").Inc()
			m.keyWaiting.WithLabelValues(e.Queue).Inc()
		}
	case worker.KeyWaited:
		m.keyWaiting.WithLabelValues(e.Queue).Dec()
	case worker.KeyMoved:
		m.keyMoves.WithLabelValues(e.Queue).Inc()
	}
}

// ended takes a run out of the in-flight gauge if it was counted in.
func (m *metrics) ended(e worker.Event) {
	k := runKey{e.Queue, e.Stream, e.Sequence}
	m.mu.Lock()
	_, ok := m.running[k]
	delete(m.running, k)
	m.mu.Unlock()
	if ok {
		m.inFlight.WithLabelValues(e.Queue).Dec()
	}
}

func (m *metrics) ran(e worker.Event, result string) {
	m.ended(e)
	m.completed.WithLabelValues(e.Queue, result).Inc()
	m.duration.WithLabelValues(e.Queue).Observe(e.Took.Seconds())
}
