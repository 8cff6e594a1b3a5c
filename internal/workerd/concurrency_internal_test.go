package workerd

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A READY job that waits for its key's slot counts as a ready wait and
// in the waiting gauge until it holds the slot; a backlog grant handed
// back counts as a backlog wait only.
func TestConcurrencyWaitsCounted(t *testing.T) {
	t.Parallel()
	m := newMetrics(prometheus.NewRegistry())
	ready, backlog := queue.StreamName("q", queue.Ready), queue.StreamName("q", queue.Backlog)
	m.observe(worker.Event{Kind: worker.KeyWaiting, Queue: "q", Stream: ready, Sequence: 1})
	m.observe(worker.Event{Kind: worker.KeyWaiting, Queue: "q", Stream: ready, Sequence: 2})
	m.observe(worker.Event{Kind: worker.KeyWaiting, Queue: "q", Stream: backlog, Sequence: 7})
	m.observe(worker.Event{Kind: worker.KeyWaited, Queue: "q", Stream: ready, Sequence: 1})
	if got := value(t, m.keyWaits.WithLabelValues("q", "ready")); got != 2 {
		t.Errorf("ready waits %v, want 2", got)
	}
	if got := value(t, m.keyWaits.WithLabelValues("q", "backlog")); got != 1 {
		t.Errorf("backlog waits %v, want 1", got)
	}
	var g dto.Metric
	if err := m.keyWaiting.WithLabelValues("q").Write(&g); err != nil {
		t.Fatal(err)
	}
	if got := g.GetGauge().GetValue(); got != 1 {
		t.Errorf("waiting %v, want 1", got)
	}
}

// A READY job moved to READY's tail while its key is at its max counts as
// a move, not as a wait.
func TestConcurrencyMovesCounted(t *testing.T) {
	t.Parallel()
	m := newMetrics(prometheus.NewRegistry())
	ready := queue.StreamName("q", queue.Ready)
	m.observe(worker.Event{Kind: worker.KeyMoved, Queue: "q", Stream: ready, Sequence: 3})
	if got := value(t, m.keyMoves.WithLabelValues("q")); got != 1 {
		t.Errorf("moves %v, want 1", got)
	}
	if got := value(t, m.keyWaits.WithLabelValues("q", "ready")); got != 0 {
		t.Errorf("ready waits %v, want 0", got)
	}
}
