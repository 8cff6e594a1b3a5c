package admittest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A decision waits at the gate until Release, then is the memory store's.
func TestGateStore(t *testing.T) {
	t.Parallel()
	g := admittest.NewGateStore(t)
	l, err := bucket.NewTokenBucket(bucket.Rate{Count: 1, Per: time.Second}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tiers := []bucket.Tier{{Key: "k", Limit: l}}
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := g.Decide(context.Background(), "g", tiers, 1)
			done <- err
		}()
	}
	g.WaitArrived(t, 2, 10*time.Second)
	select {
	case err := <-done:
		t.Fatalf("a decision passed the closed gate (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.Release()
	g.Release() // twice is fine
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := g.Entered(); n != 2 {
		t.Errorf("Entered %d, want 2", n)
	}
}
