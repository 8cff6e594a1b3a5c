package worker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Four worker processes sharing one Redis pacer drain a 600-job backlog
// at 20/s in total — not 4×20/s — within ±1% with the machine to itself
// (queuetest.CheckDrainRate); no job starts before its not-before; a key whose jobs
// are not due yet holds back no other key; each key's jobs start in their
// backlog order.
func TestLeakRateAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s of draining; -short skips it")
	}
	t.Parallel()
	const jobs, keys, workers = 600, 20, 4
	rate := bucket.Rate{Count: 20, Per: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := queuetest.Start(t)
	rds := redistest.Start(t)
	js := srv.JetStream(t)
	cfg := queue.Config{Name: "leak", Capacity: 1000, LeakRate: rate}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger")
	for range workers {
		startChild(t, childConfig{NATS: srv.URL(), Redis: rds.URL(), Queue: cfg, Concurrency: 4, Work: 5 * time.Millisecond, Ledger: path})
	}
	// Publish once every worker waits on the backlog, so that all of them
	// hold part of it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := admin.Inspect(ctx, js, cfg)
		if err == nil && info.BacklogPullers >= workers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d worker processes did not all pull the backlog within 30s: %+v, %v", workers, info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Key k00's jobs are due 10 s from now; every other key's at once.
	// Publish order interleaves the keys, so k00's jobs come first in
	// every round.
	lateAt := time.Now().Add(10 * time.Second)
	all := make([]*queue.Job, 0, jobs)
	for i := range jobs {
		j := queuetest.NewJob(t, "leak", fmt.Sprintf("k%02d", i%keys))
		if i%keys == 0 {
			j.NotBefore = lateAt
		}
		if _, err := pub.Publish(ctx, queue.Backlog, j); err != nil {
			t.Fatal(err)
		}
		all = append(all, j)
	}

	l := waitLedger(t, path, 90*time.Second, "every job acked", func(l *ledger) bool { return len(l.acks) == jobs })

	var starts, releases []time.Time
	pids := map[int]int{}
	for _, j := range all {
		ss := l.starts[j.ID]
		if len(ss) != 1 || l.acks[j.ID] != 1 {
			t.Errorf("job %s: started %d times, acked %d times; want once each", j.ID, len(ss), l.acks[j.ID])
			continue
		}
		if ss[0].at.Before(j.NotBefore) {
			t.Errorf("job %s started %v before its not-before", j.ID, j.NotBefore.Sub(ss[0].at))
		}
		starts = append(starts, ss[0].at)
		r := l.releases[j.ID]
		releases = append(releases, r.at)
		pids[r.pid]++
	}
	if t.Failed() {
		return
	}
	measure := func(ts []time.Time) (perSecond float64, span time.Duration) {
		slices.SortFunc(ts, time.Time.Compare)
		span = ts[len(ts)-1].Sub(ts[0])
		return float64(len(ts)-1) / span.Seconds(), span
	}
	startRate, startSpan := measure(starts)
	releaseRate, releaseSpan := measure(releases)
	t.Logf("%d jobs, %d processes, leak rate %s: handler starts %.4f/s over %v (%.3f%% off); releases %.4f/s over %v (%.3f%% off); releases per process %v",
		jobs, workers, rate, startRate, startSpan.Round(time.Millisecond), 100*(startRate/20-1), releaseRate, releaseSpan.Round(time.Millisecond), 100*(releaseRate/20-1), pids)
	queuetest.CheckDrainRate(t, "handler starts", startRate, 20)
	if len(pids) < 2 {
		t.Errorf("only %d process released jobs: the test did not exercise a shared pacer", len(pids))
	}

	// The late key held back nobody: while its jobs were not due, the
	// others started at the leak rate (checked above over the whole run),
	// and it never started early (checked per job). Within each key, the
	// order of the handlers' starts is the backlog order.
	for k := range keys {
		var prev time.Time
		for i := k; i < jobs; i += keys {
			at := l.starts[all[i].ID][0].at
			if !at.After(prev) {
				t.Errorf("key k%02d: job %d started at %v, not after the key's job before it (%v)", k, i, at.Format(time.StampNano), prev.Format(time.StampNano))
			}
			prev = at
		}
	}
	firstLate := time.Time{}
	for i := 0; i < jobs; i += keys {
		if at := l.starts[all[i].ID][0].at; firstLate.IsZero() || at.Before(firstLate) {
			firstLate = at
		}
	}
	earlier := 0
	for _, at := range starts {
		if at.Before(lateAt) {
			earlier++
		}
	}
	// A not-due key at the head of every round that held the others back
	// would let next to none start before it is due; the leak allows 200
	// (less the time the 600 publishes take).
	// The floor is 150 when the machine is ours; 100 in the default run,
	// where one CI run measured 135 (and a start rate 9.7 % slow).
	floor := 100
	if buckettest.ReliabilityFull() {
		floor = 150
	}
	if earlier < floor {
		t.Errorf("only %d jobs started in the 10 s before the first key's jobs were due, want ≈ 200 (at least %d): held back by a not-due key", earlier, floor)
	}
	t.Logf("first job of the late key started %v after its not-before; %d jobs of other keys started before it", firstLate.Sub(lateAt).Round(time.Millisecond), earlier)
}
