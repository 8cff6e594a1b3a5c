package worker

import (
	"testing"
	"time"
)

// A job's wait after a move to READY's tail doubles with each move, from
// 200 ms to 5 s.
func TestKeyTailDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		moves int
		want  time.Duration
	}{
		{0, 200 * time.Millisecond},
		{1, 400 * time.Millisecond},
		{2, 800 * time.Millisecond},
		{3, 1600 * time.Millisecond},
		{4, 3200 * time.Millisecond},
		{5, 5 * time.Second},
		{6, 5 * time.Second},
		{1 << 20, 5 * time.Second},
	} {
		if got := keyTailDelay(c.moves); got != c.want {
			t.Errorf("keyTailDelay(%d) = %v, want %v", c.moves, got, c.want)
		}
	}
}
