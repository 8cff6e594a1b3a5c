package keyslots_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
)

// A Watch knows the holders at its start, then each slot taken and given
// back, and says which entries changed; another queue's entries are not
// its.
func TestWatchFollowsHolders(t *testing.T) {
	t.Parallel()
	kv := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	s := keyslots.New(kv, "q", time.Minute)
	h1, ok, err := s.TryAcquire(ctx, "job1", keyA)
	if !ok || err != nil {
		t.Fatalf("first slot: %v %v", ok, err)
	}
	w := keyslots.NewWatch()
	known := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx, kv, "q", slog.New(slog.DiscardHandler), known) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-known
	ek := keyslots.EntryKey("q", keyA[0].Name, keyA[0].Token)
	if jobs, at := w.Holders(ek); !slices.Equal(jobs, []string{"job1"}) || at.IsZero() {
		t.Fatalf("at the start: %v (changed %v), want job1", jobs, at)
	}
	waitHolders := func(want ...string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			if jobs, _ := w.Holders(ek); slices.Equal(jobs, want) {
				return
			}
			select {
			case <-w.Changed():
			case <-deadline:
				jobs, _ := w.Holders(ek)
				t.Fatalf("holders %v, want %v", jobs, want)
			}
		}
	}
	other := keyslots.New(kv, "q2", time.Minute)
	if _, ok, err := other.TryAcquire(ctx, "elsewhere", keyA); !ok || err != nil {
		t.Fatalf("another queue's slot: %v %v", ok, err)
	}
	h2, ok, err := s.TryAcquire(ctx, "job2", keyA)
	if !ok || err != nil {
		t.Fatalf("second slot: %v %v", ok, err)
	}
	waitHolders("job1", "job2")
	if changed := w.TakeChanged(); !slices.Contains(changed, ek) || len(changed) != 1 {
		t.Errorf("changed entries %v, want only %s", changed, ek)
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitHolders("job2")
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitHolders()
	if _, at := w.Holders(ek); !at.IsZero() {
		t.Errorf("an entry with no holder changed at %v, want zero", at)
	}
}
