package workerd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// settleRequestTimeout bounds a settle request to the admitters: the job's
// ack waits for it, and a lost one costs only the job's cost settlement.
const settleRequestTimeout = 3 * time.Second

// costSettler sends a succeeded job's actual cost to the admitter that can
// settle it (docs/design.md#cost-settled-from-the-answer): the job's
// charge header names the route. Each job is asked for once; an admitter
// that does not answer is logged and counted, and the job is done all the
// same.
type costSettler struct {
	nc     *nats.Conn
	failed *prometheus.CounterVec // nil without a registry
}

func newCostSettler(nc *nats.Conn, reg prometheus.Registerer) *costSettler {
	c := &costSettler{nc: nc}
	if reg != nil {
		c.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_cost_settle_failures_total",
			Help: "Actual costs reported by handlers that could not be settled (no charge on the job, an invalid cost, an admitter that did not answer or refused); the jobs are done all the same.",
		}, []string{"queue", "reason"})
		reg.MustRegister(c.failed)
	}
	return c
}

// settle is worker.WorkerConfig.SettleCost.
func (c *costSettler) settle(ctx context.Context, j *queue.Job, actual int64) error {
	reason, err := c.send(ctx, j, actual)
	if err != nil && c.failed != nil {
		c.failed.WithLabelValues(j.Queue, reason).Inc()
	}
	return err
}

func (c *costSettler) send(ctx context.Context, j *queue.Job, actual int64) (reason string, err error) {
	if actual < 0 || actual > bucket.MaxActualCost {
		return "invalid", fmt.Errorf("workerd: the handler reported %s %d: want an integer from 0 to %d", spillway.HeaderCostActual, actual, bucket.MaxActualCost)
	}
	charge := j.Header.Get(queue.HeaderCharge)
	if charge == "" {
		// Decided without a store (failure mode open), or by no tier.
		return "no_charge", fmt.Errorf("workerd: job %s carries no %s: nothing to settle", j.ID, queue.HeaderCharge)
	}
	route, _, _ := strings.Cut(charge, ";")
	if c.nc == nil || route == "" || strings.ContainsAny(route, ".*> \t") {
		return "invalid", fmt.Errorf("workerd: job %s: header %s %.80q names no route", j.ID, queue.HeaderCharge, charge)
	}
	m := nats.NewMsg(admit.SettlePrefix + route)
	m.Header.Set(spillway.HeaderQueue, j.Queue)
	m.Header.Set(spillway.HeaderJobID, j.ID)
	m.Header.Set(queue.HeaderCharge, charge)
	m.Header.Set(spillway.HeaderCostActual, strconv.FormatInt(actual, 10))
	rctx, cancel := context.WithTimeout(ctx, settleRequestTimeout)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return "unreachable", fmt.Errorf("workerd: no admitter answers %s (the one that decided the job may have stopped): %w", m.Subject, err)
		}
		return "unreachable", fmt.Errorf("workerd: settle request %s: %w", m.Subject, err)
	}
	if st := reply.Header.Get(spillway.HeaderStatus); st != spillway.HandlerOK {
		return "refused", fmt.Errorf("workerd: the admitter refused the settle (%s): %s", st, reply.Header.Get(spillway.HeaderError))
	}
	return "", nil
}
