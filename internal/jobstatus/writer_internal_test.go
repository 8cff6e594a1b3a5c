package jobstatus

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// writerBundle is what a FirstWriter test checks the writer against.
type writerBundle struct {
	store   *Store
	js      jetstream.JetStream // another connection's, for writes before the writer's
	dropped *atomic.Int64       // the records the writer counted dropped
}

// setupWriter is a FirstWriter on its own embedded JetStream server, and
// the store it writes to.
func setupWriter(t *testing.T) (*FirstWriter, *writerBundle) {
	t.Helper()
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	store, err := Open(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := &writerBundle{store: store, js: js, dropped: &atomic.Int64{}}
	w, err := NewFirstWriter(srv.Connect(t), slog.New(slog.DiscardHandler), func(n int) { b.dropped.Add(int64(n)) })
	if err != nil {
		t.Fatal(err)
	}
	return w, b
}

// stopAndWait runs w as a shutdown does — its context ended before it
// took anything — and waits for the server to answer every publish, so
// that what it refused is counted.
func stopAndWait(t *testing.T, w *FirstWriter) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the writes were not acknowledged within 10 s")
	}
}

// admitted is the first record of a new job admitted now.
func admitted(id string) Record {
	now := time.Now()
	return Record{ID: id, Queue: "q", State: spillway.StateAdmitted, EnqueuedAt: now, UpdatedAt: now}
}

// The first records queued by the last answers before a shutdown — a
// batch's and singles' — are written when the writer stops, not dropped.
func TestStatusWriterWritesWhatIsQueuedAtShutdown(t *testing.T) {
	t.Parallel()
	w, b := setupWriter(t)
	var all []string
	for range 3 {
		ids, err := queue.NewJobIDs("q", 100)
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]Record, len(ids))
		for i, id := range ids {
			recs[i] = admitted(id)
		}
		w.AddBatch(recs)
		all = append(all, ids...)
	}
	for range 10 {
		id, err := queue.NewJobID("q")
		if err != nil {
			t.Fatal(err)
		}
		w.Add(admitted(id))
		all = append(all, id)
	}
	stopAndWait(t, w) // the shutdown came before the writer took anything
	missing := 0
	for _, id := range all {
		if _, err := b.store.Get(t.Context(), id); err != nil {
			missing++
		}
	}
	if dropped := b.dropped.Load(); missing != 0 || dropped != 0 {
		t.Errorf("%d of %d jobs have no record after the shutdown (%d counted dropped), want 0", missing, len(all), dropped)
	}
}

// A job whose worker wrote its record first keeps that record, and its
// first record refused is no loss; a group record refused is one, of all
// its jobs' records.
func TestStatusWriterRefusals(t *testing.T) {
	t.Parallel()
	w, b := setupWriter(t)
	id, err := queue.NewJobID("q")
	if err != nil {
		t.Fatal(err)
	}
	started := admitted(id)
	started.State, started.Attempts, started.StartedAt = spillway.StateRunning, 1, time.Now()
	if err := b.store.Put(t.Context(), started); err != nil {
		t.Fatal(err)
	}
	w.Add(admitted(id))

	ids, err := queue.NewJobIDs("q", 2) // one group
	if err != nil {
		t.Fatal(err)
	}
	batch := []Record{admitted(ids[0]), admitted(ids[1])}
	msgs, err := FirstMsgs(batch)
	if err != nil || len(msgs) != 1 || !IsGroup(msgs[0]) {
		t.Fatalf("FirstMsgs: %d messages, %v; want one group record", len(msgs), err)
	}
	if _, err := b.js.PublishMsg(t.Context(), msgs[0]); err != nil {
		t.Fatal(err)
	}
	w.AddBatch(batch) // the group again: refused

	stopAndWait(t, w)
	if got, err := b.store.Get(t.Context(), id); err != nil || got.State != spillway.StateRunning {
		t.Errorf("the started job's record: %+v, %v; want it running still", got, err)
	}
	if got := b.dropped.Load(); got != 2 {
		t.Errorf("%d records counted dropped, want 2 (the group's)", got)
	}
}

// Add and AddBatch never block: past the buffer they drop the records,
// and count them.
func TestStatusWriterDropsWhatItCannotHold(t *testing.T) {
	t.Parallel()
	w, b := setupWriter(t)
	rec := admitted("not written")
	for range firstBuffer + 1 {
		w.Add(rec)
	}
	for range firstBatches + 1 {
		w.AddBatch([]Record{rec, rec, rec})
	}
	if got := b.dropped.Load(); got != 1+3 {
		t.Errorf("%d records counted dropped, want 4 (one alone, a batch of 3)", got)
	}
}
