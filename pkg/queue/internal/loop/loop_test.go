package loop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		want time.Duration
	}{
		{0, 100 * time.Millisecond}, {1, 100 * time.Millisecond}, {2, 200 * time.Millisecond},
		{6, 3200 * time.Millisecond}, {7, 5 * time.Second}, {100, 5 * time.Second},
	} {
		if got := loop.Backoff(c.n); got != c.want {
			t.Errorf("Backoff(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := loop.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
	}
	if err := loop.Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("Sleep(1ms) = %v", err)
	}
}
