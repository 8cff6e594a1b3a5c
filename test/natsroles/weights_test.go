package natsroles

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// TestRuntimeWeightsRoles: the admitter's user writes and removes a
// queue's runtime weight rules (the admin API's entry,
// pace.RuntimeWeightsKey), a worker's user follows them but may not
// write them.
func TestRuntimeWeightsRoles(t *testing.T) {
	addr := startShipped(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	av := newViolations()
	ajs, err := jetstream.New(connect(t, addr, "admitter", av))
	if err != nil {
		t.Fatal(err)
	}
	akv, err := pace.OpenPacerBucket(ctx, ajs, 1)
	if err != nil {
		t.Fatalf("admitter: pacer bucket: %v", err)
	}
	a3 := pace.RuntimeWeight{WeightRule: queue.WeightRule{KeyPattern: queue.KeyPattern{Key: "a"}, Weight: 3}, By: "natsroles", At: time.Now()}
	if err := pace.SetRuntimeWeight(ctx, akv, "email", a3); err != nil {
		t.Fatalf("admitter: setting a runtime weight: %v", err)
	}

	wv := newViolations()
	wnc := connect(t, addr, "worker", wv)
	wjs, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	wkv, err := wjs.KeyValue(ctx, pace.PacerBucket)
	if err != nil {
		t.Fatalf("worker: pacer bucket: %v", err)
	}
	w := pace.NewWeights(queue.Fairness{})
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx, wkv, "email", slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { wcancel(); <-done })
	waitUntil(t, 10*time.Second, "the worker follows the runtime weight", func() (bool, string) {
		n, ok := w.WeightOf("a")
		return n == 3 && ok, "weight of a not 3 yet"
	})

	subject := "$KV." + pace.PacerBucket + "." + pace.RuntimeWeightsKey("email")
	if err := wnc.Publish(subject, []byte(`{"weights":[{"key":"a","weight":1000}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	wv.waitFor(t, "worker writing the runtime weights", subject)
	if rs, err := pace.ReadRuntimeWeights(ctx, akv, "email"); err != nil || len(rs) != 1 || rs[0].Weight != 3 {
		t.Errorf("runtime weights %+v (%v): want a worker's write refused, a still 3", rs, err)
	}

	if found, err := pace.DeleteRuntimeWeight(ctx, akv, "email", a3.KeyPattern); err != nil || !found {
		t.Errorf("admitter: removing the runtime weight: found %v, %v", found, err)
	}
	waitUntil(t, 10*time.Second, "the worker follows the removal", func() (bool, string) {
		_, ok := w.WeightOf("a")
		return !ok, "weights still in force"
	})
	av.mu.Lock()
	defer av.mu.Unlock()
	if len(av.errs) > 0 {
		t.Errorf("admitter: the server reported %q", av.errs)
	}
}
