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
	// One after another: the goroutine that ran a function takes the next.
	// It counts itself idle just before it waits, so a function handed over
	// in between starts a goroutine of its own: a few may, not most.
	const seq = 20
	for range seq {
		done := make(chan struct{})
		k.Go(func() { close(done) })
		<-done
		waitIdle(k.started.Load())
	}
	if got := k.started.Load(); got > seq/4 {
		t.Fatalf("%d functions one after another started %d goroutines, want most of them run on a kept one", seq, got)
	}

	// 8 at once run together (none waits for another), and every goroutine
	// is kept after them.
	var running sync.WaitGroup
	running.Add(8)
	release := make(chan struct{})
	for range 8 {
		k.Go(func() { running.Done(); <-release })
	}
	running.Wait()
	close(release)
	if got := k.started.Load(); got < 8 {
		t.Fatalf("8 functions ran at once on %d goroutines", got)
	}
	waitIdle(k.started.Load())
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
