package admitterd

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/door"
)

// AdmitMetrics turns the admitter's events (admit.Event) and its store's
// failures (admit.Failover's OnError and OnFallback) into the decision
// metrics (docs/design.md#metrics), as workerd's metrics turn queue.Events
// into the worker's. A nil *AdmitMetrics records nothing. It is safe for
// concurrent use.
type AdmitMetrics struct {
	decisions   *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	failureMode *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
	shadow      *prometheus.CounterVec
	natsDropped *prometheus.CounterVec
	superseded  *prometheus.CounterVec

	// Series looked up once per label values, not once per event (a
	// lookup checks and hashes its label values): decisionKey →
	// prometheus.Counter, queue → prometheus.Observer.
	counters, durations sync.Map
}

type decisionKey struct{ queue, verdict, reason string }

// NewAdmitMetrics registers the decision metrics with reg; nil reg: no
// metrics (a nil *AdmitMetrics).
func NewAdmitMetrics(reg prometheus.Registerer) *AdmitMetrics {
	if reg == nil {
		return nil
	}
	m := &AdmitMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_decisions_total",
			Help: "Submissions decided, by queue, verdict (admitted, queued, rejected, duplicate, error) and reason.",
		}, []string{"queue", "verdict", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spillway_decision_duration_seconds",
			Help:    "Time from a submission's arrival to its answer, the job stored, by queue.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"queue"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_store_errors_total",
			Help: "Failed decisions of the shared bucket store, by store.",
		}, []string{"store"}),
		failureMode: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_failure_mode_total",
			Help: "Decisions taken by the failure mode instead of the shared store, by mode (open, closed, local).",
		}, []string{"mode"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_retry_after_fallbacks_total",
			Help: "Refusals of a full backlog whose Retry-After could not be read from the backlog and is the time to drain a whole backlog, by queue.",
		}, []string{"queue"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_shadow_decisions_total",
			Help: "Decisions of shadow limit tiers, which never enforce, by queue, tier (its name) and verdict (admitted, would-queue, would-reject).",
		}, []string{"queue", "tier", "verdict"}),
		natsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_nats_requests_dropped_total",
			Help: "Requests to the NATS door dropped unanswered, by reason (reply_subject: a reply subject outside nats.reply_prefix).",
		}, []string{"reason"}),
		superseded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_jobs_superseded_total",
			Help: "Debounced jobs superseded by a newer job of their debounce key before they started (they never run), by queue.",
		}, []string{"queue"}),
	}
	m.natsDropped.WithLabelValues(door.DropReplySubject) // shown at 0 from the start
	reg.MustRegister(m.decisions, m.duration, m.storeErrors, m.failureMode, m.fallbacks, m.shadow, m.natsDropped, m.superseded)
	return m
}

// NATSDropped counts a request the NATS door dropped: door.NATSAccess.Dropped.
func (m *AdmitMetrics) NATSDropped(reason string) {
	if m == nil {
		return
	}
	m.natsDropped.WithLabelValues(reason).Inc()
}

// Observe counts one admitter event: admit.Options.Observe.
func (m *AdmitMetrics) Observe(e admit.Event) {
	if m == nil {
		return
	}
	switch e.Kind {
	case admit.Decided:
		m.counter(decisionKey{e.Queue, e.Verdict, e.Reason}).Inc()
		m.durationOf(e.Queue).Observe(e.Took.Seconds())
	case admit.ShadowDecided:
		m.shadow.WithLabelValues(e.Queue, e.Tier, e.Verdict).Inc()
	case admit.RetryAfterFallback:
		m.fallbacks.WithLabelValues(e.Queue).Inc()
	case admit.JobSuperseded:
		m.superseded.WithLabelValues(e.Queue).Inc()
	}
}

func (m *AdmitMetrics) counter(k decisionKey) prometheus.Counter {
	if c, ok := m.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.counters.LoadOrStore(k, m.decisions.WithLabelValues(k.queue, k.verdict, k.reason))
	return c.(prometheus.Counter)
}

func (m *AdmitMetrics) durationOf(q string) prometheus.Observer {
	if o, ok := m.durations.Load(q); ok {
		return o.(prometheus.Observer)
	}
	o, _ := m.durations.LoadOrStore(q, m.duration.WithLabelValues(q))
	return o.(prometheus.Observer)
}

// StoreError counts a failed decision of store: admit.Failover.OnError.
func (m *AdmitMetrics) StoreError(store string) {
	if m != nil {
		m.storeErrors.WithLabelValues(store).Inc()
	}
}

// FailureMode counts a decision taken by mode: admit.Failover.OnFallback.
func (m *AdmitMetrics) FailureMode(mode config.FailureMode) {
	if m != nil {
		m.failureMode.WithLabelValues(string(mode)).Inc()
	}
}

// Init starts at 0 the series whose label values are known in advance,
// so that rate() and alert rules see 0 rather than nothing before the
// first event: each queue of cfg's decisions by the verdicts and reasons
// its configuration can give (admit.QueueSeries), its decision latency
// and its shadow tiers' decisions by verdict; store errors of store, the
// kind in use ("redis" or "memory"); and decisions of each failure mode.
// Call it at start and after each reload, for the queues a reload adds;
// series of removed queues stay.
func (m *AdmitMetrics) Init(cfg *config.Config, store string) {
	if m == nil {
		return
	}
	for i := range cfg.Queues {
		q := &cfg.Queues[i]
		s := admit.QueueSeries(cfg, q)
		for _, vr := range s.Decisions {
			m.counter(decisionKey{q.Name, vr[0], vr[1]})
		}
		m.durationOf(q.Name)
		m.superseded.WithLabelValues(q.Name)
		for _, tv := range s.Shadow {
			m.shadow.WithLabelValues(q.Name, tv[0], tv[1])
		}
	}
	m.storeErrors.WithLabelValues(store)
	for _, mode := range []config.FailureMode{config.FailOpen, config.FailClosed, config.FailLocal} {
		m.failureMode.WithLabelValues(string(mode))
	}
}
