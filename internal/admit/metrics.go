package admit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
)

// Metrics are the admitter's decision metrics (DESIGN §6). A nil *Metrics
// records nothing.
type Metrics struct {
	decisions   *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	failureMode *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
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
	}
	reg.MustRegister(m.decisions, m.duration, m.storeErrors, m.failureMode, m.fallbacks)
	return m
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
