package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// TestMeasureAdaptiveLeak measures the adaptive leak against a downstream
// that answers 429 (Retry-After 1) to every call beyond 30 in the last
// second: two workers, leak_rate {max: 100/s, adaptive: true}, 40 s. It
// reports the calls per second, the share of 429s and the busiest 1 s
// window. It takes 40 s, so it runs only with SPILLWAY_MEASURE_PUSHBACK=1.
func TestMeasureAdaptiveLeak(t *testing.T) {
	if os.Getenv("SPILLWAY_MEASURE_PUSHBACK") == "" {
		t.Skip("a 40 s measurement; set SPILLWAY_MEASURE_PUSHBACK=1 to run it")
	}
	const (
		limit   = 30
		run     = 40 * time.Second
		workers = 2
		latency = 5 * time.Millisecond
	)
	maxRate := bucket.Rate{Count: 100, Per: time.Second}
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	ctx := t.Context()
	cfg := queue.Config{Name: "measure", Capacity: 10_000, Memory: true, LeakRate: maxRate, Adaptive: true}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		j := queuetest.NewJob(t, cfg.Name, fmt.Sprintf("k%03d", i%200))
		if _, err := pub.Publish(ctx, queue.Backlog, j); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := pace.OpenPacerBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		received []time.Time // every call, for the downstream's window
		calls    []time.Time
		rejected []time.Time
	)
	downstream := func(ctx context.Context, j *queue.Job) error {
		now := time.Now()
		mu.Lock()
		received = append(received, now)
		calls = append(calls, now)
		i := sort.Search(len(received), func(i int) bool { return received[i].After(now.Add(-time.Second)) })
		over := len(received)-i > limit
		if over {
			rejected = append(rejected, now)
		}
		mu.Unlock()
		time.Sleep(latency)
		if over {
			return retry.Pushback(errors.New("429 Too Many Requests"), time.Second)
		}
		return nil
	}
	began := time.Now()
	var yps []*pace.YieldingPacer
	for range workers {
		kp, err := pace.NewKVPacer(kv, cfg.Name, maxRate)
		if err != nil {
			t.Fatal(err)
		}
		yp, err := pace.NewYieldingPacer(kp, kv, cfg.Name, maxRate, true)
		if err != nil {
			t.Fatal(err)
		}
		yps = append(yps, yp)
		queuetest.RunWorker(t, js, worker.WorkerConfig{Queue: cfg, Concurrency: 8, Pacer: yp}, downstream)
	}
	time.Sleep(run)
	mu.Lock()
	defer mu.Unlock()
	end := began.Add(run)
	perSecond := make([]int, int(run/time.Second))
	for _, c := range calls {
		if s := int(c.Sub(began) / time.Second); s >= 0 && s < len(perSecond) {
			perSecond[s]++
		}
	}
	busiest := func(from time.Time) int {
		most, j := 0, 0
		for i := range calls {
			if calls[i].Before(from) || calls[i].After(end) {
				continue
			}
			for j < i && calls[j].Before(calls[i].Add(-time.Second)) || j < i && calls[j].Before(from) {
				j++
			}
			most = max(most, i-j+1)
		}
		return most
	}
	last := 0
	for _, c := range calls {
		if c.After(end.Add(-20*time.Second)) && !c.After(end) {
			last++
		}
	}
	inRun := 0
	rej := 0
	for _, c := range calls {
		if !c.After(end) {
			inRun++
		}
	}
	for _, r := range rejected {
		if !r.After(end) {
			rej++
		}
	}
	pauses := uint64(0)
	for _, yp := range yps {
		pauses += yp.Pauses()
	}
	t.Logf("calls per second: %v", perSecond)
	t.Logf("calls %d, 429s %d (%.1f%%), pauses %d", inRun, rej, 100*float64(rej)/float64(max(inRun, 1)), pauses)
	t.Logf("last 20 s: %.1f calls/s; busiest 1 s window: %d over the run, %d in the last 20 s",
		float64(last)/20, busiest(began), busiest(end.Add(-20*time.Second)))
}
