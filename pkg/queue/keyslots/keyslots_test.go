package keyslots_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func setup(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := keyslots.OpenBucket(t.Context(), queuetest.Start(t).JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

var keyA = []queue.ConcurrencyKey{{Name: "per-tenant", Max: 2, Token: queue.KeyToken("a")}}

// Two workers share a key's two slots: a third job waits until one is
// given back, and the entry is gone once nobody holds it.
func TestSlotsAcrossWorkers(t *testing.T) {
	t.Parallel()
	kv := setup(t)
	ctx := t.Context()
	w1, w2 := keyslots.New(kv, "q", time.Minute), keyslots.New(kv, "q", time.Minute)
	h1, ok1, err1 := w1.TryAcquire(ctx, "job1", keyA)
	h2, ok2, err2 := w2.TryAcquire(ctx, "job2", keyA)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		t.Fatalf("the first two jobs: %v %v %v %v, want both slots", ok1, err1, ok2, err2)
	}
	if _, ok, err := w1.TryAcquire(ctx, "job3", keyA); ok || err != nil {
		t.Fatalf("a third job of a key with max 2: %v, %v; want it refused", ok, err)
	}
	other := []queue.ConcurrencyKey{{Name: "per-tenant", Max: 2, Token: queue.KeyToken("b")}}
	if _, ok, err := w1.TryAcquire(ctx, "job-b", other); !ok || err != nil {
		t.Fatalf("another key: %v, %v; want its own slots", ok, err)
	}
	running, err := keyslots.Running(ctx, kv, "q")
	if err != nil || running["per-tenant"][queue.KeyToken("a")] != 2 || running["per-tenant"][queue.KeyToken("b")] != 1 {
		t.Fatalf("Running = %v, %v; want 2 of a and 1 of b", running, err)
	}
	got := make(chan error, 1)
	go func() {
		h3, err := w1.Acquire(ctx, "job3", keyA, nil)
		if err == nil {
			err = h3.Release(ctx)
		}
		got <- err
	}()
	if err := h2.Release(ctx); err != nil { // another worker's release: the waiter finds it by looking
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting job did not get the slot given back")
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, keyslots.EntryKey("q", "per-tenant", queue.KeyToken("a"))); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the entry of a key nobody holds: %v, want it deleted", err)
	}
}

// A worker that stops beating loses its slots once a lease passed
// without a beat, as the waiting worker saw it; a job given again takes
// its own earlier slot back at once.
func TestDeadWorkersSlotsAreTakenOver(t *testing.T) {
	t.Parallel()
	kv := setup(t)
	ctx := t.Context()
	one := []queue.ConcurrencyKey{{Name: "c", Max: 1, Token: queue.KeyToken("a")}}
	dead := keyslots.New(kv, "q", 300*time.Millisecond)
	if _, ok, err := dead.TryAcquire(ctx, "job1", one); !ok || err != nil {
		t.Fatal(ok, err)
	}
	alive := keyslots.New(kv, "q", 300*time.Millisecond)
	// job1 given again to the live worker: its own earlier slot.
	h, ok, err := alive.TryAcquire(ctx, "job1", one)
	if !ok || err != nil {
		t.Fatalf("the same job given again: %v, %v; want its slot", ok, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := dead.TryAcquire(ctx, "job2", one); !ok || err != nil {
		t.Fatal(ok, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	waited := false
	h, err = alive.Acquire(wctx, "job3", one, func() { waited = true })
	if err != nil || !waited {
		t.Fatalf("job3 behind a dead holder: %v (waited %v); want the slot after the lease", err, waited)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A renewed holder keeps its slot past many leases.
func TestRenewedHolderKeepsItsSlot(t *testing.T) {
	t.Parallel()
	kv := setup(t)
	ctx := t.Context()
	one := []queue.ConcurrencyKey{{Name: "c", Max: 1, Token: queue.KeyToken("a")}}
	const lease = time.Second
	holder, other := keyslots.New(kv, "q", lease), keyslots.New(kv, "q", lease)
	h, ok, err := holder.TryAcquire(ctx, "job1", one)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	renewed := 0
	for end := time.Now().Add(4 * lease); time.Now().Before(end); {
		if _, ok, err := other.TryAcquire(ctx, "job2", one); ok || err != nil {
			t.Fatalf("after %d renewals: another job took the slot (%v, %v)", renewed, ok, err)
		}
		time.Sleep(lease / 6)
		if renewed%2 == 1 {
			if err := h.Renew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		renewed++
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := other.TryAcquire(ctx, "job2", one); !ok || err != nil {
		t.Fatalf("after the release: %v, %v", ok, err)
	}
}
