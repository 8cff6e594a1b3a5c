package admit

import (
	"context"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// TestPositions: a queued job's position is its place in the backlog,
// counted from the backlog's first job as the refresh last saw it —
// including for a backlog that has never held a job.
func TestPositions(t *testing.T) {
	t.Parallel()
	js := queuetest.Start(t).JetStream(t)
	cfg := &config.Config{Queues: []config.Queue{{Name: "q", Backlog: queue.Config{Name: "q", LeakRate: bucket.Rate{Count: 1, Per: time.Second}, Memory: true}}}}
	if err := queue.EnsureStreams(context.Background(), js, cfg.Queues[0].Backlog); err != nil {
		t.Fatal(err)
	}
	p := newPositions(js)
	if got := p.position("q", 7); got != 1 {
		t.Errorf("before any refresh: position %d, want 1 (nothing known)", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.run(ctx, func() *config.Config { return cfg }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	refreshed := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, ok := p.first["q"]
		return ok
	}
	deadline := time.Now().Add(10 * time.Second)
	for !refreshed() {
		if time.Now().After(deadline) {
			t.Fatal("positions not refreshed within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	// The refresh saw an empty backlog that never held a job: its jobs
	// will be sequences 1, 2, 3, …
	for seq := uint64(1); seq <= 3; seq++ {
		if got := p.position("q", seq); got != int64(seq) {
			t.Errorf("a backlog that never held a job: sequence %d at position %d, want %d", seq, got, seq)
		}
	}
	// Once the backlog's first job is sequence 11, sequence 13 is third.
	p.mu.Lock()
	p.first["q"] = 11
	p.mu.Unlock()
	for seq, want := range map[uint64]int64{11: 1, 13: 3, 5: 1} {
		if got := p.position("q", seq); got != want {
			t.Errorf("first job 11: sequence %d at position %d, want %d", seq, got, want)
		}
	}
}
