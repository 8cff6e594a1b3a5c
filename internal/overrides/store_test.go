package overrides_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// TestStoreKeepsKindsApart: a tier's and a concurrency entry's override
// of the same queue, name and pattern are two entries of the bucket, each
// read, watched and deleted on its own; a record naming both a tier and
// an entry, or neither, is refused.
func TestStoreKeepsKindsApart(t *testing.T) {
	t.Parallel()
	ns := queuetest.Start(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kv, err := overrides.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPattern(t, "tenant-*")
	tier := overrides.Target{Queue: "q", Tier: "per-tenant"}
	conc := overrides.Target{Queue: "q", Concurrency: "per-tenant"}
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	if err := overrides.Put(ctx, kv, overrides.Record{Target: tier, Key: "tenant-*", Params: overrides.Params{Rate: "1/s", Burst: 2}, By: "a", At: at}); err != nil {
		t.Fatal(err)
	}
	if err := overrides.Put(ctx, kv, overrides.Record{Target: conc, Key: "tenant-*", Max: 7, By: "b", At: at}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []overrides.Target{{Queue: "q", Tier: "t", Concurrency: "c"}, {Queue: "q"}, {Tier: "t"}} {
		if err := overrides.Put(ctx, kv, overrides.Record{Target: bad, Key: "k", Max: 1}); err == nil {
			t.Errorf("Put of %+v: no error", bad)
		}
	}

	w := overrides.NewWatcher(kv, nil)
	done := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	go func() { defer close(done); _ = w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not load the bucket within 10 s")
	}
	if rs := w.Records(); len(rs) != 2 {
		t.Fatalf("the watcher has %d records, want 2 (one of each kind): %+v", len(rs), rs)
	}

	r, ok, err := overrides.Get(ctx, kv, conc, p)
	if err != nil || !ok || r.Max != 7 || r.Tier != "" || r.Params != (overrides.Params{}) {
		t.Errorf("Get of the concurrency override: %+v, %v, %v", r, ok, err)
	}
	if err := overrides.Delete(ctx, kv, conc, p); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := overrides.Get(ctx, kv, conc, p); ok || err != nil {
		t.Errorf("the concurrency override after its Delete: %v, %v", ok, err)
	}
	if r, ok, err := overrides.Get(ctx, kv, tier, p); err != nil || !ok || r.Params.Burst != 2 || r.Concurrency != "" {
		t.Errorf("the tier's override after the concurrency one's Delete: %+v, %v, %v", r, ok, err)
	}
}
