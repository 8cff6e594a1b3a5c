package admit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// Metrics are the admitter's decision metrics (docs/design.md#metrics). A nil *Metrics
// records nothing.
type Metrics struct {
	decisions   *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	failureMode *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
	shadow      *prometheus.CounterVec // shadow.go
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
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
		shadow: newShadowDecisions(),
	}
	reg.MustRegister(m.decisions, m.duration, m.storeErrors, m.failureMode, m.fallbacks, m.shadow)
	return m
}

// Init starts at 0 the series whose label values are known in advance,
// so that rate() and alert rules see 0 rather than nothing before the
// first event: each queue of cfg's decisions by the verdicts and reasons
// its configuration can give, its decision latency and its shadow tiers'
// decisions by verdict; store errors of
// store, the kind in use ("redis" or "memory"); and decisions of each
// failure mode. Call it at start and after each reload, for the queues a
// reload adds; series of removed queues stay.
func (m *Metrics) Init(cfg *config.Config, store string) {
	if m == nil {
		return
	}
	for i := range cfg.Queues {
		q := &cfg.Queues[i]
		for _, vr := range decisionSeries(enforcing(q), cfg.Redis.Shared(), cfg.Redis.FailureMode) {
			m.decisions.WithLabelValues(q.Name, vr[0], vr[1])
		}
		m.duration.WithLabelValues(q.Name)
		m.initShadow(q)
	}
	m.storeErrors.WithLabelValues(store)
	for _, mode := range []config.FailureMode{config.FailOpen, config.FailClosed, config.FailLocal} {
		m.failureMode.WithLabelValues(string(mode))
	}
}

// decisionSeries are the verdicts and reasons (as Submit counts them) a
// queue's configuration can give: every queue's, excess when a tier's
// algorithm has one, key_backlog_full with a per-key bound, and those of
// the failure mode with a shared store. Errors other than unavailable
// and internal (ours, which an alert watches) are the clients' and
// start at their first.
func decisionSeries(q *config.Queue, shared bool, mode config.FailureMode) [][2]string {
	s := [][2]string{
		{"admitted", "limit"}, {"queued", "limit"}, {"rejected", "limit"}, {"rejected", "backlog_full"},
		{"duplicate", "idempotency"}, {"error", "unavailable"}, {"error", "internal"},
	}
	for _, l := range q.Limits {
		if l.Limit.Algorithm() != bucket.LeakyBucket {
			s = append(s, [2]string{"queued", "excess"})
			break
		}
	}
	if q.Backlog.PerKeyCapacity > 0 {
		s = append(s, [2]string{"rejected", "key_backlog_full"})
	}
	if shared {
		switch mode {
		case config.FailOpen, "":
			s = append(s, [2]string{"admitted", "failure_mode_open"})
		case config.FailLocal:
			s = append(s, [2]string{"admitted", "limit_local"}, [2]string{"queued", "limit_local"}, [2]string{"rejected", "limit_local"})
		}
	}
	return s
}

func (m *Metrics) decided(q, verdict, reason string, took time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(q, verdict, reason).Inc()
	m.duration.WithLabelValues(q).Observe(took.Seconds())
}

func (m *Metrics) retryAfterFallback(q string) {
	if m != nil {
		m.fallbacks.WithLabelValues(q).Inc()
	}
}

// StoreError counts a failed decision of store.
func (m *Metrics) StoreError(store string) {
	if m != nil {
		m.storeErrors.WithLabelValues(store).Inc()
	}
}

// FailureMode counts a decision taken by mode.
func (m *Metrics) FailureMode(mode config.FailureMode) {
	if m != nil {
		m.failureMode.WithLabelValues(string(mode)).Inc()
	}
}

// queueMetrics are one queue's decision series for the jobs of a batch:
// each series is looked up once per batch rather than once per job (a
// lookup hashes its label values). Not safe for concurrent use; a nil
// *queueMetrics records nothing.
type queueMetrics struct {
	m        *Metrics
	q        string
	duration prometheus.Observer
	counts   map[[2]string]prometheus.Counter
}

// forQueue returns q's series, nil when m is nil.
func (m *Metrics) forQueue(q string) *queueMetrics {
	if m == nil {
		return nil
	}
	return &queueMetrics{m: m, q: q, duration: m.duration.WithLabelValues(q), counts: map[[2]string]prometheus.Counter{}}
}

// decided counts a decision as Metrics.decided does.
func (qm *queueMetrics) decided(verdict, reason string, took time.Duration) {
	if qm == nil {
		return
	}
	k := [2]string{verdict, reason}
	c := qm.counts[k]
	if c == nil {
		c = qm.m.decisions.WithLabelValues(qm.q, verdict, reason)
		qm.counts[k] = c
	}
	c.Inc()
	qm.duration.Observe(took.Seconds())
}
