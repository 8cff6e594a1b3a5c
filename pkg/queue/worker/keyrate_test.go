package worker_test

import (
	"context"
	"errors"
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

// With pushback: key and an adaptive leak, a key's pushbacks slow only
// that key: two workers at leak {max: 40/s, adaptive: true}, a downstream
// that answers key p 429 (Retry-After 1 s) whenever p's calls exceed 5 in
// the last second and key q always 200. Over 10 s from 2 s after the
// first pushback, q's jobs start at 30/s or more while p's calls stay
// within twice its downstream's 5/s (about 3/s measured: its rate settles
// under the limit, as an adaptive leak does); no job is dead-lettered.
// It is a rate measured over 10 s that passed 9 runs in 10 on a machine
// loaded by other tests (q at 28.9/s in the tenth), so it runs only with
// SPILLWAY_MEASURE_PUSHBACK=1, as the queue's adaptive-leak measurement
// does.
func TestKeyPushbackSlowsOnlyItsKey(t *testing.T) {
	if os.Getenv("SPILLWAY_MEASURE_PUSHBACK") == "" {
		t.Skip("a 10 s rate measurement; set SPILLWAY_MEASURE_PUSHBACK=1 to run it")
	}
	// Not parallel: a rate measured over a fixed window, which the
	// package's other tests would share the CPU with.
	const (
		pLimit = 5
		window = 10 * time.Second
	)
	rate := bucket.Rate{Count: 40, Per: time.Second}
	cfg := queue.Config{Name: "keyrate", Capacity: 10_000, Memory: true, LeakRate: rate, Adaptive: true, Pushback: queue.PushbackKey}
	ctx, b := queuetest.StartQueue(t, cfg)
	kv, err := pace.OpenPacerBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		pCalls   []time.Time // every call of p, for the downstream's window
		pOK      []time.Time
		qCalls   []time.Time
		rejected int
	)
	first := make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, j *queue.Job) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if j.Key == "q" {
			qCalls = append(qCalls, now)
			return nil
		}
		pCalls = append(pCalls, now)
		i := sort.Search(len(pCalls), func(i int) bool { return pCalls[i].After(now.Add(-time.Second)) })
		if len(pCalls)-i > pLimit {
			rejected++
			once.Do(func() { close(first) })
			return retry.Pushback(errors.New("429 Too Many Requests"), time.Second)
		}
		pOK = append(pOK, now)
		return nil
	}
	rec := newRecorder()
	for range 2 {
		kp, err := pace.NewKVPacer(kv, cfg.Name, rate)
		if err != nil {
			t.Fatal(err)
		}
		yp, err := pace.NewYieldingPacer(kp, kv, cfg.Name, rate, true)
		if err != nil {
			t.Fatal(err)
		}
		queuetest.RunWorker(t, b.JS, worker.WorkerConfig{
			Queue: cfg, Concurrency: 8, Observe: rec.observe, Pacer: yp,
			Retry: retry.Policy{MaxAttempts: 100, Initial: time.Second, Max: time.Second},
		}, h)
	}
	var jobs []*queue.Job
	for i := range 1200 {
		key := "q"
		if i%3 == 0 {
			key = "p"
		}
		jobs = append(jobs, queuetest.NewJob(t, cfg.Name, key))
	}
	if ok, _, _, other := b.PublishAll(ctx, queue.Backlog, jobs); ok != len(jobs) {
		t.Fatalf("published %d of %d: %v", ok, len(jobs), other)
	}
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("p was never pushed back")
	}
	from := time.Now().Add(2 * time.Second)
	to := from.Add(window)
	time.Sleep(time.Until(to)) // a measurement over a fixed window
	mu.Lock()
	in := func(ts []time.Time) float64 {
		n := 0
		for _, c := range ts {
			if !c.Before(from) && c.Before(to) {
				n++
			}
		}
		return float64(n) / window.Seconds()
	}
	q, p, pok, rej := in(qCalls), in(pCalls), in(pOK), rejected
	mu.Unlock()
	t.Logf("over %v from 2 s after p's first 429: q %.1f starts/s, p %.1f calls/s (%.1f answered 200), 429s in all %d", window, q, p, pok, rej)
	if q < 30 {
		t.Errorf("q started %.1f jobs a second, want at least 30 of the leak's 40", q)
	}
	if p > 2*pLimit {
		t.Errorf("p was called %.1f times a second, want near %d", p, pLimit)
	}
	if n := rec.count(worker.DeadLettered); n != 0 {
		t.Errorf("%d jobs dead-lettered, want none", n)
	}
}
