package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Two workers drain a backlog at 20/s through a shared pacer. A pause
// (docs/design.md#pause) stops every start — the backlog's and READY's,
// including jobs admitted while paused — from a second after it until the
// resume; after the resume the backlog starts at the leak rate again,
// within 1% with the machine to itself (checkDrainRate); every job runs
// exactly once.
func TestPauseStopsStartsUntilResume(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15 s of draining; -short skips it")
	}
	t.Parallel()
	const backlogJobs, readyJobs, workers = 260, 20, 2
	cfg := testQueue("paused")
	cfg.LeakRate = bucket.Rate{Count: 20, Per: time.Second}
	ctx, b := setup(t, cfg)
	kv, err := pace.OpenPacerBucket(ctx, b.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		starts = map[string][]time.Time{}
	)
	handler := func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		starts[j.ID] = append(starts[j.ID], time.Now())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(starts)
	}
	rec := newRecorder()
	for range workers {
		kp, err := pace.NewKVPacer(kv, cfg.Name, cfg.LeakRate)
		if err != nil {
			t.Fatal(err)
		}
		yp, err := pace.NewYieldingPacer(kp, kv, cfg.Name, cfg.LeakRate, false)
		if err != nil {
			t.Fatal(err)
		}
		runWorker(t, b.js, worker.WorkerConfig{Queue: b.cfg, Concurrency: 4, Pacer: yp, Observe: rec.observe}, handler)
	}
	backlog := map[string]bool{}
	for i := range backlogJobs {
		for _, j := range publishBacklog(t, ctx, b, fmt.Sprintf("k%02d", i%10), 1, time.Time{}) {
			backlog[j.ID] = true
		}
	}
	rec.waitFor(t, 30*time.Second, "40 backlog jobs started", func() bool { return count() >= 40 })

	pausedAt := time.Now()
	if err := pace.SetPause(ctx, b.js, cfg.Name, 1, pace.PauseState{Paused: true, At: pausedAt, By: "test", Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	// Admitted while paused: they wait too.
	var ready []string
	for range readyJobs {
		j := newJob(t, cfg.Name, "r")
		if _, err := b.pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		ready = append(ready, j.ID)
	}
	time.Sleep(4 * time.Second)
	st, err := pace.ReadPause(ctx, b.js, cfg.Name)
	if err != nil || !st.Paused || st.By != "test" || st.Reason != "maintenance" {
		t.Fatalf("ReadPause = %+v, %v; want paused by test for maintenance", st, err)
	}
	resumedAt := time.Now()
	if err := pace.SetPause(ctx, b.js, cfg.Name, 1, pace.PauseState{At: resumedAt, By: "test"}); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 40*time.Second, "every job done", func() bool { return rec.count(worker.Succeeded) == backlogJobs+readyJobs })

	mu.Lock()
	defer mu.Unlock()
	var during, lost int
	var after []time.Time
	for id := range backlog {
		ss := starts[id]
		if len(ss) != 1 {
			t.Errorf("backlog job %s started %d times, want once", id, len(ss))
			lost++
			continue
		}
		if ss[0].After(pausedAt.Add(time.Second)) && ss[0].Before(resumedAt) {
			during++
		}
		if ss[0].After(resumedAt) {
			after = append(after, ss[0])
		}
	}
	for _, id := range ready {
		ss := starts[id]
		if len(ss) != 1 {
			t.Errorf("ready job %s started %d times, want once", id, len(ss))
			lost++
			continue
		}
		if ss[0].After(pausedAt.Add(time.Second)) && ss[0].Before(resumedAt) {
			during++
		}
	}
	if during != 0 {
		t.Errorf("%d jobs started between 1 s after the pause and the resume, want 0", during)
	}
	if lost != 0 {
		t.Errorf("%d jobs did not run exactly once", lost)
	}
	slices.SortFunc(after, time.Time.Compare)
	if len(after) < 100 {
		t.Fatalf("only %d backlog starts after the resume; want at least 100 to measure the rate", len(after))
	}
	span := after[len(after)-1].Sub(after[0])
	rate := float64(len(after)-1) / span.Seconds()
	t.Logf("pause %v: 0 starts wanted, %d seen; after the resume %d backlog starts at %.3f/s over %v (%.2f%% off 20/s); first start %v after the resume",
		resumedAt.Sub(pausedAt).Round(time.Millisecond), during, len(after), rate, span.Round(time.Millisecond), 100*(rate/20-1), after[0].Sub(resumedAt).Round(time.Millisecond))
	checkDrainRate(t, "backlog starts after the resume", rate, 20)
}
