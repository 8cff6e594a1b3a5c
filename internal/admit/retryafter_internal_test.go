package admit

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// A cached scan answers for the jobs that may have left since: with three
// due jobs scanned at t0 and a slot of 50ms, at t0+100ms the first two may
// be gone, so the answer is the third's release, one slot from now.
func TestRetryAfterCachedScanSkipsReleasedJobs(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	now := t0
	r := newRetryAfters(nil, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	done := make(chan struct{})
	close(done)
	r.views["q"] = &backlogView{at: t0, done: done, jobs: []queue.Pending{
		{Sequence: 1, Due: t0.Add(-time.Second)}, {Sequence: 2, Due: t0.Add(-time.Second)}, {Sequence: 3, Due: t0.Add(-time.Second)},
	}}
	q := &config.Queue{Name: "q", Backlog: queue.Config{Name: "q", LeakRate: bucket.Rate{Count: 20, Per: time.Second}}}
	mu.Lock()
	now = t0.Add(100 * time.Millisecond)
	mu.Unlock()
	got, err := r.queueFull(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if want := 50*time.Millisecond + retryMargin; got != want {
		t.Errorf("retry after %v, want %v (the third job's release, one slot from now, plus the margin)", got, want)
	}
}

// When the backlog cannot be read, the answer is the time to drain a
// whole backlog at the leak rate, and it is counted.
func TestRetryAfterFallsBackWhenTheBacklogCannotBeRead(t *testing.T) {
	t.Parallel()
	js := queuetest.Start(t).JetStream(t) // no streams: every read fails
	var (
		mu     sync.Mutex
		events []Event
	)
	observe := func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	a := &Admitter{o: Options{Logger: slog.New(slog.DiscardHandler), Observe: observe}, retry: newRetryAfters(js, time.Now)}
	q := &config.Queue{Name: "gone", Backlog: queue.Config{Name: "gone", Capacity: 30, LeakRate: bucket.Rate{Count: 10, Per: time.Second}}}
	for _, keyFull := range []bool{false, true} {
		if got, want := a.retryAfter(context.Background(), q, "k", keyFull), 3*time.Second+retryMargin; got != want {
			t.Errorf("key full %t: retry after %v, want %v (30 jobs at 10/s, plus the margin)", keyFull, got, want)
		}
	}
	mu.Lock()
	if want := (Event{Kind: RetryAfterFallback, Queue: "gone"}); len(events) != 2 || events[0] != want || events[1] != want {
		t.Errorf("events %+v, want two %+v (spillway_retry_after_fallbacks_total)", events, want)
	}
	mu.Unlock()
	huge := *q
	huge.Backlog.Capacity = 1 << 62
	if got := fallback(&huge); got != maxWait {
		t.Errorf("a backlog of 2^62 jobs: fallback %v, want %v (no overflow)", got, maxWait)
	}
}
