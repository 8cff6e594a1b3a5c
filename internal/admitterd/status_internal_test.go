package admitterd

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// The first records queued by the last answers before a shutdown — a
// batch's and singles' — are written when the writer stops, not dropped.
func TestStatusWriterWritesWhatIsQueuedAtShutdown(t *testing.T) {
	t.Parallel()
	js := queuetest.Start(t).JetStream(t)
	store, err := jobstatus.Open(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{writes: make(chan jobstatus.Record, 16), batches: make(chan []jobstatus.Record, 4),
		statusDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "status_records_dropped_total", Help: "First status records not written."}), log: slog.New(slog.DiscardHandler)}
	now := time.Now()
	var all []string
	for range 3 {
		ids, err := queue.NewJobIDs(100)
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]jobstatus.Record, len(ids))
		for i, id := range ids {
			recs[i] = jobstatus.Record{ID: id, Queue: "q", State: jobstatus.Admitted, EnqueuedAt: now, UpdatedAt: now}
		}
		s.batches <- recs
		all = append(all, ids...)
	}
	for range 10 {
		id, err := queue.NewJobID()
		if err != nil {
			t.Fatal(err)
		}
		s.writes <- jobstatus.Record{ID: id, Queue: "q", State: jobstatus.Admitted, EnqueuedAt: now, UpdatedAt: now}
		all = append(all, id)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the shutdown came before the writer took anything
	if err := s.writeStatus(ctx, js); err != nil {
		t.Fatal(err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the writes were not acknowledged within 10 s")
	}
	missing := 0
	for _, id := range all {
		if _, err := store.Get(t.Context(), id); err != nil {
			missing++
		}
	}
	var dropped dto.Metric
	if err := s.statusDropped.Write(&dropped); err != nil {
		t.Fatal(err)
	}
	if missing != 0 || dropped.GetCounter().GetValue() != 0 {
		t.Errorf("%d of %d jobs have no record after the shutdown (%v counted dropped), want 0", missing, len(all), dropped.GetCounter().GetValue())
	}
}
