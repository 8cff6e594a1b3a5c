package admittest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// GateStore is a real memory store whose decisions wait at a gate: a test
// holds submissions in the middle of a decision, where a real store would
// be slow, and lets them all go with Release.
type GateStore struct {
	*bucket.Memory
	entered atomic.Int64
	arrived chan struct{} // one send per decision that reached the gate
	open    chan struct{}
	once    sync.Once
}

// NewGateStore is a closed gate before an empty memory store. It opens in
// tb.Cleanup, so that no submission is left waiting.
func NewGateStore(tb testing.TB) *GateStore {
	tb.Helper()
	m, err := bucket.NewMemory()
	if err != nil {
		tb.Fatal(err)
	}
	g := &GateStore{Memory: m, arrived: make(chan struct{}, 1<<14), open: make(chan struct{})}
	tb.Cleanup(g.Release)
	return g
}

// Decide waits for the gate to open (or ctx to end), then decides in the
// memory store.
func (g *GateStore) Decide(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	g.entered.Add(1)
	g.arrived <- struct{}{}
	select {
	case <-g.open:
	case <-ctx.Done():
		return bucket.Decision{}, ctx.Err()
	}
	return g.Memory.Decide(ctx, group, tiers, cost)
}

// Release opens the gate, for the decisions waiting and those to come.
// It may be called more than once.
func (g *GateStore) Release() { g.once.Do(func() { close(g.open) }) }

// Entered is the number of decisions that have reached the gate so far.
func (g *GateStore) Entered() int64 { return g.entered.Load() }

// WaitArrived waits until n more decisions have reached the gate, and
// fails the test if they do not within timeout.
func (g *GateStore) WaitArrived(tb testing.TB, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.After(timeout)
	for range n {
		select {
		case <-g.arrived:
		case <-deadline:
			tb.Fatalf("only %d of %d decisions reached the gate within %v", g.Entered(), n, timeout)
		}
	}
}
