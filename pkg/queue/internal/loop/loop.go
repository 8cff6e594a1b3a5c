// Package loop holds the two waits every long-running loop of the queue's
// packages shares: a sleep that ends with its context, and the backoff
// after a loop's consecutive failures.
package loop

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, and then returns ctx.Err(). A d of
// zero or less does not wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff is the wait after the n-th consecutive failure of a loop:
// 100ms doubling to 5s.
func Backoff(n int) time.Duration {
	if n > 6 {
		return 5 * time.Second
	}
	return min(5*time.Second, 100*time.Millisecond<<max(0, n-1))
}
