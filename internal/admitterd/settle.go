package admitterd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// SettleBucket is the JetStream KV bucket where admitters record which
// jobs of the shared store were settled, so that each is settled once.
const SettleBucket = "spillway-settled"

// settleTimeout bounds one settle: the store's round trip and the record.
const settleTimeout = 5 * time.Second

// settler answers the workers' settle requests
// (docs/design.md#cost-settled-from-the-answer).
type settler struct {
	s     *Service
	units *prometheus.CounterVec
	subs  []*nats.Subscription
}

// openSettleKV creates or updates the bucket of settled jobs: records
// live as long as job-status records.
func openSettleKV(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: SettleBucket, TTL: ttl, Replicas: replicas, Storage: jetstream.FileStorage,
		Description: "Spillway: jobs whose cost was settled (each once)",
	})
}

// startSettle subscribes to this admitter's settle subject and, with a
// shared store, to the shared one in the admitters' queue group.
func (s *Service) startSettle(reg prometheus.Registerer, shared bool) error {
	st := &settler{s: s, units: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_cost_settled_units_total",
		Help: "Units settled from the actual costs handlers reported, by direction: refunded (the job cost less) or charged (it cost more).",
	}, []string{"queue", "direction"})}
	reg.MustRegister(st.units)
	sub, err := s.nc.Subscribe(admit.SettlePrefix+s.instanceID, st.answer)
	if err != nil {
		return err
	}
	st.subs = append(st.subs, sub)
	if shared {
		if sub, err = s.nc.QueueSubscribe(admit.SettlePrefix+admit.SettleShared, admit.AdmitterSettleGroup, st.answer); err != nil {
			return err
		}
		st.subs = append(st.subs, sub)
	}
	return nil
}

// answer settles one request: headers Spillway-Queue, Spillway-Job-Id,
// Spillway-Charge and Spillway-Cost-Actual. The reply's Spillway-Status
// is ok, or permanent (with Spillway-Error) for a request that can never
// apply, or retry for a store that failed.
func (st *settler) answer(m *nats.Msg) {
	reply := nats.NewMsg(m.Reply)
	q, id := m.Header.Get(spillway.HeaderQueue), m.Header.Get(spillway.HeaderJobID)
	actual, err := strconv.ParseInt(m.Header.Get(spillway.HeaderCostActual), 10, 64)
	if err != nil {
		err = fmt.Errorf("%w: header %s %.40q: want an integer", admit.ErrBadSettle, spillway.HeaderCostActual, m.Header.Get(spillway.HeaderCostActual))
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		var done admit.Settled
		done, err = st.s.admitter.SettleCost(ctx, q, id, m.Header.Get(queue.HeaderCharge), actual)
		cancel()
		switch {
		case err != nil:
		case done.Delta < 0:
			st.units.WithLabelValues(done.Queue, "refunded").Add(float64(-done.Delta))
		case done.Delta > 0:
			st.units.WithLabelValues(done.Queue, "charged").Add(float64(done.Delta))
		}
	}
	switch {
	case err == nil:
		reply.Header.Set(spillway.HeaderStatus, spillway.HandlerOK)
	case errors.Is(err, admit.ErrBadSettle):
		reply.Header.Set(spillway.HeaderStatus, spillway.HandlerPermanent)
		reply.Header.Set(spillway.HeaderError, strings.ReplaceAll(err.Error(), "\n", "; "))
	default:
		reply.Header.Set(spillway.HeaderStatus, spillway.HandlerRetry)
		reply.Header.Set(spillway.HeaderError, strings.ReplaceAll(err.Error(), "\n", "; "))
		st.s.log.Warn("settling a job's cost failed", "queue", q, "job", id, "err", err)
	}
	if m.Reply != "" {
		_ = m.RespondMsg(reply)
	}
}
