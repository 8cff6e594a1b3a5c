package queue_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// READY holds at most ReadyCapacity jobs: JetStream refuses the next with
// ErrReadyFull (not the backlog's errors), stores nothing, and takes jobs
// again once one leaves.
func TestReadyCapacityIsExact(t *testing.T) {
	t.Parallel()
	const capacity, extra = 50, 13
	cfg := queue.Config{Name: "rc", Capacity: 10, ReadyCapacity: capacity, Memory: true}
	ctx, b := queuetest.StartQueue(t, cfg)
	if sc := cfg.StreamConfig(queue.Ready); sc.MaxMsgs != capacity || sc.Discard != jetstream.DiscardNew {
		t.Fatalf("READY stream config: MaxMsgs %d, Discard %v; want %d and DiscardNew", sc.MaxMsgs, sc.Discard, capacity)
	}
	var ok, full int
	for i := range capacity + extra {
		_, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "rc", fmt.Sprint("k", i%7)))
		switch {
		case err == nil:
			ok++
		case errors.Is(err, queue.ErrReadyFull):
			if errors.Is(err, queue.ErrQueueFull) || errors.Is(err, queue.ErrKeyQueueFull) {
				t.Fatalf("a full READY is also reported as a full backlog: %v", err)
			}
			full++
		default:
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if ok != capacity || full != extra {
		t.Fatalf("%d stored, %d × ErrReadyFull; want %d and %d", ok, full, capacity, extra)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("rc", queue.Ready)); n != capacity {
		t.Fatalf("READY holds %d jobs, want %d", n, capacity)
	}
	in, err := admin.Inspect(ctx, b.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if in.Ready != capacity || in.ReadyCapacity != capacity {
		t.Errorf("Inspect: ready %d of %d, want %d of %d", in.Ready, in.ReadyCapacity, capacity, capacity)
	}
}

// The default READY capacity is DefaultReadyCapacity, and a READY stream
// whose bound a new configuration lowers gets it on EnsureStreams without
// losing a job, even when it already holds more than the bound.
func TestEnsureStreamsBoundsAnExistingReady(t *testing.T) {
	t.Parallel()
	if sc := (queue.Config{Name: "x"}).StreamConfig(queue.Ready); sc.MaxMsgs != queue.DefaultReadyCapacity || sc.Discard != jetstream.DiscardNew {
		t.Fatalf("default READY: MaxMsgs %d, Discard %v; want %d and DiscardNew", sc.MaxMsgs, sc.Discard, queue.DefaultReadyCapacity)
	}
	cfg := queue.Config{Name: "old", ReadyCapacity: 3}
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "old"})
	// Made with no bound, then configured with a bound of 3.
	old := cfg.StreamConfig(queue.Ready)
	old.MaxMsgs, old.Discard = -1, jetstream.DiscardOld
	if _, err := b.JS.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "old", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := queue.EnsureStreams(ctx, b.JS, cfg); err != nil {
		t.Fatal(err)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("old", queue.Ready)); n != 5 {
		t.Fatalf("READY holds %d jobs after its bound was set to 3, want all 5", n)
	}
	if _, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "old", "x")); !errors.Is(err, queue.ErrReadyFull) {
		t.Fatalf("a publish to a READY over its new bound: %v, want ErrReadyFull", err)
	}
}
