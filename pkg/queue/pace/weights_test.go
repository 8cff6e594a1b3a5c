package pace_test

import (
	"log/slog"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// The weights an admitter publishes reach a worker that follows the entry;
// before there is one, the worker's own weights apply; an unreadable entry
// keeps the weights in force.
func TestWeightsFollowTheEntry(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	kv, err := pace.OpenPacerBucket(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	own := queue.Fairness{Weights: []queue.WeightRule{{KeyPattern: queue.KeyPattern{Key: "a"}, Weight: 2}}}
	w := pace.NewWeights(own)
	go w.Run(t.Context(), kv, "hooks", slog.New(slog.DiscardHandler))
	if got, ok := w.WeightOf("a"); got != 2 || !ok {
		t.Errorf("before any entry: weight of a %d (%v), want the worker's own 2", got, ok)
	}
	if _, ok := pace.NewWeights(queue.Fairness{}).WeightOf("a"); ok {
		t.Error("no entry and no weights of its own: ok, want the stamped weight to count")
	}
	rules := []queue.WeightRule{
		{KeyPattern: queue.KeyPattern{Key: "t-", Prefix: true}, Weight: 4},
		{KeyPattern: queue.KeyPattern{Key: "", Prefix: true}, Weight: 5},
		{KeyPattern: queue.KeyPattern{Key: "a"}, Weight: 3},
	}
	if err := pace.PublishWeights(t.Context(), kv, "hooks", rules); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the published weights", func() bool { n, _ := w.WeightOf("a"); return n == 3 })
	for key, want := range map[string]int{"a": 3, "t-1": 4, "other": 5} {
		if got, _ := w.WeightOf(key); got != want {
			t.Errorf("weight of %q: %d, want %d", key, got, want)
		}
	}
	// Publishing the same weights writes nothing.
	e, err := kv.Get(t.Context(), pace.WeightsKey("hooks"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pace.PublishWeights(t.Context(), kv, "hooks", rules); err != nil {
		t.Fatal(err)
	}
	if e2, err := kv.Get(t.Context(), pace.WeightsKey("hooks")); err != nil || e2.Revision() != e.Revision() {
		t.Errorf("the same weights published again: revision %d → %v (%v), want unchanged", e.Revision(), e2, err)
	}
	if _, err := kv.Put(t.Context(), pace.WeightsKey("hooks"), []byte(`{"weights":[{"key":"a","weight":0}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := pace.PublishWeights(t.Context(), kv, "hooks", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the weights removed", func() bool { n, ok := w.WeightOf("a"); return n == 1 && ok })
	if _, err := pace.DecodeWeights([]byte(`{"weights":[{"key":"a","weight":1001}]}`)); err == nil {
		t.Error("DecodeWeights accepted a weight of 1001")
	}
}
