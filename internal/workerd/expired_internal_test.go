package workerd

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A job dead-lettered for its expiry counts in spillway_jobs_expired_total
// and among the dead letters; other dead letters only there.
func TestExpiredJobsCounted(t *testing.T) {
	t.Parallel()
	m := newMetrics(prometheus.NewRegistry())
	m.initQueue("q")
	if got := value(t, m.expired.WithLabelValues("q")); got != 0 {
		t.Fatalf("expired before any event: %v", got)
	}
	m.observe(worker.Event{Kind: worker.DeadLettered, Queue: "q", Reason: queue.ReasonExpired})
	m.observe(worker.Event{Kind: worker.DeadLettered, Queue: "q", Reason: "invalid job"})
	if got := value(t, m.expired.WithLabelValues("q")); got != 1 {
		t.Errorf("spillway_jobs_expired_total %v, want 1", got)
	}
	if got := value(t, m.dead.WithLabelValues("q")); got != 2 {
		t.Errorf("spillway_dead_letters_total %v, want 2", got)
	}
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
