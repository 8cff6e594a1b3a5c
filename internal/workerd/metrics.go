package workerd

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// metrics are the worker metrics, fed by queue.Events.
type metrics struct {
	completed *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	wait      *prometheus.HistogramVec
	inFlight  *prometheus.GaugeVec
	dead      *prometheus.CounterVec
	leak      *prometheus.GaugeVec

	mu      sync.Mutex
	running map[runKey]struct{} // started and not yet ended, so the gauge never drifts
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
		leak: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_leak_rate",
			Help: "The backlog's configured leak rate in jobs per second, by queue.",
		}, []string{"queue"}),
	}
	m.running = make(map[runKey]struct{})
	reg.MustRegister(m.completed, m.duration, m.wait, m.inFlight, m.dead, m.leak)
	return m
}

func (m *metrics) setLeak(q string, r bucket.Rate) {
	if m == nil || r.Count <= 0 {
		return
	}
	m.leak.WithLabelValues(q).Set(float64(r.Count) / r.Per.Seconds())
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
}

// dropLeak removes the leak rate of a queue no longer worked here.
func (m *metrics) dropLeak(q string) {
	if m == nil {
		return
	}
	m.leak.DeleteLabelValues(q)
}

func (m *metrics) observe(e queue.Event) {
	if m == nil {
		return
	}
	switch e.Kind {
	case queue.Started:
		m.mu.Lock()
		m.running[runKey{e.Queue, e.Stream, e.Sequence}] = struct{}{}
		m.mu.Unlock()
		m.inFlight.WithLabelValues(e.Queue).Inc()
	case queue.Succeeded:
		m.ran(e, "succeeded")
	case queue.Retrying:
		m.ran(e, "retrying")
	case queue.DeadLettered:
		if e.Took > 0 {
			m.ran(e, "dead")
		}
		m.dead.WithLabelValues(e.Queue).Inc()
	case queue.Released:
		m.wait.WithLabelValues(e.Queue).Observe(e.Waited.Seconds())
	case queue.HandedBack:
		m.ended(e)
	}
}

// ended takes a run out of the in-flight gauge if it was counted in.
func (m *metrics) ended(e queue.Event) {
	k := runKey{e.Queue, e.Stream, e.Sequence}
	m.mu.Lock()
	_, ok := m.running[k]
	delete(m.running, k)
	m.mu.Unlock()
	if ok {
		m.inFlight.WithLabelValues(e.Queue).Dec()
	}
}

func (m *metrics) ran(e queue.Event, result string) {
	m.ended(e)
	m.completed.WithLabelValues(e.Queue, result).Inc()
	m.duration.WithLabelValues(e.Queue).Observe(e.Took.Seconds())
}
