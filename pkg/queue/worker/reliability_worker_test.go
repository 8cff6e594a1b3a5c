package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The reliability suite's failing handler (docs/reliability.md): the panicking Go handler (the always-failing webhook is
// test/e2e TestReliabilityWorkerPoisonKey; TestPermanentErrorsAndPanics
// and TestPoisonJobIsDeadLetteredAfterMaxAttempts check one job each).
// Under a steady load of healthy jobs, one key's handler panics on every
// try: each of its jobs is tried exactly MaxAttempts times and lands once
// in DEAD with its id, headers, attempts and last error; the workers keep
// running; and the healthy keys' completion rate with the panicking key
// present is within 5% of the rate without it, measured in the same run.
func TestReliabilityPanickingHandler(t *testing.T) {
	t.Parallel()
	phase := 3 * time.Second
	if os.Getenv("SPILLWAY_RELIABILITY") == "full" {
		phase = 30 * time.Second
	}
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cfg := queuetest.QueueConfig("panics")
	cfg.Capacity = 100_000
	_, b := queuetest.StartQueue(t, cfg)
	// setup's context lasts a minute; the full version runs longer.
	ctx, cancel := context.WithTimeout(context.Background(), 2*phase+2*time.Minute)
	t.Cleanup(cancel)
	policy := retry.Policy{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}
	var (
		mu        sync.Mutex
		tries     = map[string]int{}       // job id → handler calls
		done      = map[string]time.Time{} // healthy job id → when its handler succeeded
		published = map[string]time.Time{}
	)
	h := func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		tries[j.ID]++
		mu.Unlock()
		if j.Key == "boom" {
			panic("boom on attempt " + strconv.Itoa(j.Attempt))
		}
		time.Sleep(5 * time.Millisecond) // the job's work
		mu.Lock()
		done[j.ID] = time.Now()
		mu.Unlock()
		return nil
	}
	quiet := slog.New(slog.DiscardHandler) // each panic logs its stack
	for range 2 {
		queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 8, Retry: policy, Logger: quiet}, h)
	}

	// publish sends one job of key every `every` until stop closes.
	var wg sync.WaitGroup
	publish := func(key string, every time.Duration, header nats.Header, stop <-chan struct{}, sent *[]*queue.Job) {
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				j := queuetest.NewJob(t, "panics", key+strconv.Itoa(i%4))
				if key == "boom" {
					j.Key = "boom"
				}
				j.Header = header
				if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
					t.Errorf("publishing: %v", err)
					return
				}
				*sent = append(*sent, j)
				mu.Lock()
				published[j.ID] = time.Now()
				mu.Unlock()
			}
		})
	}
	var healthy, boom []*queue.Job
	stopHealthy, stopBoom := make(chan struct{}), make(chan struct{})
	publish("healthy", 5*time.Millisecond, nil, stopHealthy, &healthy)
	completions := func(from, to time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range done {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
		return n
	}
	waitUntil := func(d time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after %v: still waiting for %s", d, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUntil(30*time.Second, "healthy jobs completing", func() bool { return completions(time.Time{}, time.Now()) >= 20 })
	aStart := time.Now()
	waitUntil(phase+time.Minute, "the phase without panics", func() bool { return time.Since(aStart) >= phase })
	aEnd := time.Now()
	publish("boom", 20*time.Millisecond, nats.Header{"Traceparent": {traceparent}}, stopBoom, &boom)
	bStart := time.Now()
	waitUntil(phase+time.Minute, "the phase with panics", func() bool { return time.Since(bStart) >= phase })
	bEnd := time.Now()
	close(stopBoom)
	close(stopHealthy)
	wg.Wait()

	// The rate achieved for the load offered: a loaded machine's publisher
	// does not keep its ticks exactly, and its lag is not the workers'.
	offered := func(from, to time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, j := range healthy {
			if at := published[j.ID]; !at.Before(from) && at.Before(to) {
				n++
			}
		}
		return n
	}
	rateA := float64(completions(aStart, aEnd)) / aEnd.Sub(aStart).Seconds()
	rateB := float64(completions(bStart, bEnd)) / bEnd.Sub(bStart).Seconds()
	offA := float64(offered(aStart, aEnd)) / aEnd.Sub(aStart).Seconds()
	offB := float64(offered(bStart, bEnd)) / bEnd.Sub(bStart).Seconds()
	drop := 100 * (rateA/offA - rateB/offB) / (rateA / offA)

	waitUntil(time.Minute, "every job settled", func() bool {
		return queuetest.Stored(t, ctx, b.JS, queue.StreamName("panics", queue.Ready)) == 0
	})
	dead := map[string]int{}
	wrong := 0
	for _, d := range deadLetters(t, ctx, b.JS, "panics") {
		id := d.Header.Get(spillway.HeaderJobID)
		dead[id]++
		a := d.Header.Get(spillway.HeaderAttempt)
		want := map[string]string{
			spillway.HeaderKey:     "boom",
			spillway.HeaderAttempt: strconv.Itoa(policy.MaxAttempts),
			queue.HeaderDeadReason: fmt.Sprintf("attempts exhausted (%d of %d)", policy.MaxAttempts, policy.MaxAttempts),
			queue.HeaderLastError:  "handler panicked: boom on attempt " + a,
			"Traceparent":          traceparent,
		}
		for h, v := range want {
			if got := d.Header.Get(h); got != v {
				wrong++
				t.Errorf("dead letter of %s: %s = %q, want %q", id, h, got, v)
			}
		}
		if string(d.Data) != "payload of "+id {
			wrong++
			t.Errorf("dead letter of %s: payload %q", id, d.Data)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	badTries, extra, lost := 0, 0, 0
	for _, j := range boom {
		if tries[j.ID] != policy.MaxAttempts || dead[j.ID] != 1 {
			badTries++
			if badTries <= 5 {
				t.Errorf("panicking job %s: %d tries, %d dead letters; want %d and 1", j.ID, tries[j.ID], dead[j.ID], policy.MaxAttempts)
			}
		}
	}
	for _, j := range healthy {
		if _, ok := done[j.ID]; !ok {
			lost++
		}
		extra += max(0, tries[j.ID]-1)
		if dead[j.ID] != 0 {
			t.Errorf("healthy job %s dead-lettered", j.ID)
		}
	}
	t.Logf("figure: %s: healthy keys: %.2f jobs/s completed of %.2f/s offered without the panicking key, %.2f/s of %.2f/s with it (%.2f%% drop, over %v each)", t.Name(), rateA, offA, rateB, offB, drop, phase)
	t.Logf("figure: %s: %d panicking jobs: %d not tried exactly %d times or not dead-lettered once; %d dead letters, %d wrong fields; %d healthy jobs: %d lost, %d extra executions",
		t.Name(), len(boom), badTries, policy.MaxAttempts, len(dead), wrong, len(healthy), lost, extra)
	if len(boom) == 0 || len(dead) != len(boom) {
		t.Errorf("%d dead letters for %d panicking jobs, want one each", len(dead), len(boom))
	}
	if lost != 0 || extra != 0 {
		t.Errorf("healthy jobs: %d lost, %d extra executions; want 0 and 0", lost, extra)
	}
	if drop >= 5 {
		t.Errorf("healthy keys' completion rate dropped %.2f%% with the panicking key present (%.2f/s of %.2f/s → %.2f/s of %.2f/s), want < 5%%", drop, rateA, offA, rateB, offB)
	}
}
