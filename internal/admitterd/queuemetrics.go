package admitterd

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
)

// inspectTimeout bounds one scrape's reads of JetStream, all queues
// together, so a slow server costs a scrape its queue figures, not its
// timeout.
const inspectTimeout = 3 * time.Second

// queueCollector exports each configured queue's state (docs/design.md#metrics) as
// read from JetStream at scrape time, so every admitter reports the same
// figures whichever wrote the jobs; dashboards take max by (queue). A
// queue JetStream cannot be read for is counted in
// spillway_queue_inspect_errors_total and left out of that scrape rather
// than reported as empty.
type queueCollector struct {
	in     *admin.Inspector
	config func() *config.Config
	log    *slog.Logger
	errors *prometheus.CounterVec

	depth, capacity, perKey, fill, oldest, drain *prometheus.Desc
	ready, dead, ackPending, maxAckPending       *prometheus.Desc
	backlogPullers, backlogHeld                  *prometheus.Desc
	readyCapacity, paused                        *prometheus.Desc
}

func newQueueCollector(in *admin.Inspector, cfg func() *config.Config, log *slog.Logger) *queueCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("spillway_queue_"+name, help, []string{"queue"}, nil)
	}
	return &queueCollector{
		in: in, config: cfg, log: log,
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_queue_inspect_errors_total",
			Help: "Scrapes in which a queue's streams or consumers could not be read from JetStream, by queue.",
		}, []string{"queue"}),
		depth:          d("depth", "Jobs in the queue's backlog, read from JetStream."),
		capacity:       d("capacity", "The backlog's capacity in jobs (backlog.capacity)."),
		perKey:         d("per_key_capacity", "The backlog's capacity per key (backlog.per_key_capacity; 0: none)."),
		fill:           d("fill_ratio", "Backlog depth over capacity, 0 to 1."),
		oldest:         d("oldest_age_seconds", "How long the backlog's oldest job has waited (0 when empty)."),
		drain:          d("estimated_drain_seconds", "Time to drain the backlog at the leak rate if nothing more arrives."),
		ready:          d("ready", "Admitted jobs not yet finished: waiting, running or waiting for a retry."),
		dead:           d("dead", "Jobs in the queue's dead-letter stream."),
		ackPending:     d("ack_pending", "Ready jobs delivered to workers and not yet acknowledged."),
		maxAckPending:  d("max_ack_pending", "The ready consumer's bound on unacknowledged jobs (0: no consumer yet)."),
		backlogPullers: d("backlog_pullers", "Pulls waiting for a grant of the backlog's drain (consumer spillway-grants), from workers with a handler free: 0 with jobs due means no worker takes backlog jobs."),
		backlogHeld:    d("backlog_held", "Grants of the backlog's drain that workers took and have not settled: jobs waiting for their booked start or running their first try."),
		readyCapacity:  d("ready_capacity", "READY's capacity in jobs (ready.capacity); when full, admitted jobs are queued in the backlog."),
		paused:         d("paused", "1 while an operator has the queue paused (POST /v1/queues/{queue}/pause): its workers start none of its jobs; else 0."),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
	c.errors.Describe(ch)
}

func (c *queueCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.depth, c.capacity, c.perKey, c.fill, c.oldest, c.drain,
		c.ready, c.dead, c.ackPending, c.maxAckPending, c.backlogPullers, c.backlogHeld, c.readyCapacity, c.paused}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	queues := c.config().Queues
	cfgs := make([]queue.Config, len(queues))
	for i := range queues {
		cfgs[i] = queues[i].Backlog
	}
	snap, err := c.in.Snapshot(ctx, cfgs)
	if err != nil {
		c.log.Warn("metrics: reading the queues' state from JetStream", "err", err)
	}
	for _, q := range queues {
		// The error series exists at 0 from the first scrape, so the
		// first failure is an increase a rule can see.
		errs := c.errors.WithLabelValues(q.Name)
		if snap == nil {
			errs.Inc()
			continue
		}
		in, ok := snap.Infos[q.Name]
		if !ok {
			errs.Inc()
			c.log.Warn("metrics: reading a queue's state from JetStream", "queue", q.Name, "err", snap.Errs[q.Name])
			continue
		}
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, q.Name)
		}
		g(c.depth, float64(in.Backlog))
		g(c.capacity, float64(in.Capacity))
		g(c.perKey, float64(in.PerKeyCapacity))
		g(c.fill, in.Fill)
		g(c.oldest, in.OldestAge.Seconds())
		g(c.drain, in.EstimatedDrain.Seconds())
		g(c.ready, float64(in.Ready))
		g(c.dead, float64(in.Dead))
		g(c.ackPending, float64(in.InFlight))
		g(c.maxAckPending, float64(in.MaxAckPending))
		g(c.backlogPullers, float64(in.BacklogPullers))
		g(c.backlogHeld, float64(in.BacklogHeld))
		g(c.readyCapacity, float64(in.ReadyCapacity))
		v := 0.0
		if snap.Pause[q.Name].Paused {
			v = 1
		}
		g(c.paused, v)
	}
	c.errors.Collect(ch)
}

// failureModeCollector exports spillway_failure_mode_active: 1 for the
// configured mode while the shared store is down, read from the Failover
// at scrape time so it cannot drift from what decisions do. Without a
// shared store (memory only) it is always 0.
type failureModeCollector struct {
	f    *admit.Failover
	desc *prometheus.Desc
}

func newFailureModeCollector(f *admit.Failover) *failureModeCollector {
	return &failureModeCollector{f: f, desc: prometheus.NewDesc("spillway_failure_mode_active",
		"1 while the shared bucket store is unreachable and decisions take the failure mode, by mode; else 0.",
		[]string{"mode"}, nil)}
}

func (c *failureModeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *failureModeCollector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if down, _ := c.f.Down(); down {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, string(c.f.Mode()))
}
