package bucket

import (
	"testing"
	"time"
)

// The one-read wall clock stays within a millisecond of time.Now and never
// runs backwards between re-bases.
func TestWallClockFollowsTimeNow(t *testing.T) {
	var c wallClock
	prev := c.now()
	deadline := time.Now().Add(1500 * time.Millisecond) // spans a re-base
	for time.Now().Before(deadline) {
		before := time.Now().UnixNano()
		got := c.now()
		after := time.Now().UnixNano()
		if got < before-int64(time.Millisecond) || got > after+int64(time.Millisecond) {
			t.Fatalf("wall clock %d outside [%d, %d] ± 1ms", got, before, after)
		}
		if got < prev-int64(time.Millisecond) {
			t.Fatalf("wall clock went back %v", time.Duration(prev-got))
		}
		prev = got
		time.Sleep(time.Millisecond)
	}
}
