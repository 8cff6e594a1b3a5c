package worker

import (
	"sync"
	"testing"
	"time"
)

// A kept goroutine runs the next function handed to it while it waits, and
// functions handed over at once each get a goroutine of their own.
func TestKeeperKeepsGoroutines(t *testing.T) {
	k := newKeeper()
	defer k.stop()
	waitIdle := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for k.idle.Load() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines waiting, want %d", k.idle.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 20 {
		done := make(chan struct{})
		k.Go(func() { close(done) })
		<-done
		waitIdle(1)
		if got := k.started.Load(); got != 1 {
			t.Fatalf("after %d functions one after another: %d goroutines started, want 1", i+1, got)
		}
	}

	// 8 at once: the waiting one takes one, 7 more start; all run together.
	var running sync.WaitGroup
	running.Add(8)
	release := make(chan struct{})
	for range 8 {
		k.Go(func() { running.Done(); <-release })
	}
	running.Wait()
	close(release)
	waitIdle(8)
	if got := k.started.Load(); got != 8 {
		t.Fatalf("8 functions at once: %d goroutines started in all, want 8", got)
	}
}

// stop ends the waiting goroutines (goleak in TestMain checks none is left)
// and a function handed over after it still runs.
func TestKeeperStop(t *testing.T) {
	k := newKeeper()
	done := make(chan struct{})
	k.Go(func() { close(done) })
	<-done
	k.stop()
	deadline := time.Now().Add(5 * time.Second)
	for k.idle.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a kept goroutine still waits after stop")
		}
		time.Sleep(time.Millisecond)
	}
	ran := make(chan struct{})
	k.Go(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a function handed over after stop did not run")
	}
}
