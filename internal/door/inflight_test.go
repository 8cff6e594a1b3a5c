package door

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/testkit/metrictest"
)

// reservation is one acquire running in the background.
type reservation struct {
	release func()
	ok      bool
	done    chan struct{}
	cancel  context.CancelFunc
}

func reserveBG(f *inflight, n, limit int64) *reservation {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reservation{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		r.release, r.ok = f.acquire(ctx, n, limit)
	}()
	return r
}

// granted waits for r's answer and reports whether it got its bytes.
func (r *reservation) granted(t *testing.T) bool {
	t.Helper()
	select {
	case <-r.done:
		return r.ok
	case <-time.After(10 * time.Second):
		t.Fatal("an acquire neither got its bytes nor gave up")
		return false
	}
}

// waiting waits until f has n waiters.
func waiting(t *testing.T, f *inflight, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		got := f.waiters.Len()
		f.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (f *inflight) inUse() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used
}

// TestInflight follows reservations of one bound of 100 bytes: room is
// given in arrival order, a reservation larger than the bound takes the
// whole bound, a raised bound lets waiters in, a waiter whose context
// ends is shed and lets those behind it in, and a lowered bound lowers the
// waiters' reservations with it.
func TestInflight(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := newInflight(reg)

	a := reserveBG(f, 60, 100)
	if !a.granted(t) {
		t.Fatal("60 of 100 bytes: not granted")
	}
	b := reserveBG(f, 60, 100) // no room: waits
	waiting(t, f, 1)
	c := reserveBG(f, 10, 100) // there is room, but b came first
	waiting(t, f, 2)
	a.release()
	if !b.granted(t) || !c.granted(t) {
		t.Fatal("a's release: b and c not granted")
	}
	if got := f.inUse(); got != 70 {
		t.Errorf("%d bytes in use, want 70", got)
	}
	a.release() // a second release gives nothing back
	if got := f.inUse(); got != 70 {
		t.Errorf("after a second release: %d bytes in use, want 70", got)
	}

	// Larger than the bound: waits for all of it.
	big := reserveBG(f, 500, 100)
	waiting(t, f, 1)
	b.release()
	c.release()
	if !big.granted(t) {
		t.Fatal("500 bytes under a bound of 100: not granted once alone")
	}
	if got := f.inUse(); got != 100 {
		t.Errorf("%d bytes in use, want the bound, 100", got)
	}

	// A raised bound lets a waiter in.
	d := reserveBG(f, 50, 100)
	waiting(t, f, 1)
	e := reserveBG(f, 50, 200)
	if !d.granted(t) || !e.granted(t) {
		t.Fatal("a bound raised to 200: the waiter and the newcomer not granted")
	}
	d.release()
	e.release()

	// A waiter whose context ends is shed; the one behind it gets in
	// (the bound now 150, of which big holds 100).
	g := reserveBG(f, 100, 150)
	waiting(t, f, 1)
	h := reserveBG(f, 10, 150)
	waiting(t, f, 2)
	g.cancel()
	if g.granted(t) {
		t.Fatal("a cancelled waiter was granted")
	}
	if !h.granted(t) {
		t.Fatal("the waiter behind a shed one: not granted")
	}
	big.release()
	h.release()

	// A bound lowered below a waiter's reservation: the waiter takes the
	// new bound, and gets in once alone.
	x := reserveBG(f, 40, 150)
	if !x.granted(t) {
		t.Fatal("40 of 150 bytes: not granted")
	}
	y := reserveBG(f, 140, 150)
	waiting(t, f, 1)
	z := reserveBG(f, 10, 50) // lowers the bound to 50
	waiting(t, f, 2)
	x.release()
	if !y.granted(t) {
		t.Fatal("a waiter of 140 bytes under a bound lowered to 50: not granted once alone")
	}
	y.release()
	if !z.granted(t) {
		t.Fatal("the waiter behind it: not granted")
	}
	z.release()
	if got := f.inUse(); got != 0 {
		t.Errorf("%d bytes in use after every release, want 0", got)
	}
	for name, want := range map[string]float64{
		"spillway_http_requests_shed_total":  1,
		"spillway_http_inflight_waits_total": 8,
		"spillway_http_inflight_bytes":       0,
	} {
		if got := metrictest.Sum(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
