package worker_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// killsEnv sets how many times TestKillWorkerLosesNothing kills a worker
// (default 20; `make kill-test` runs 100).
const killsEnv = "SPILLWAY_KILLS"

// Worker processes are killed with SIGKILL mid-job, again and again, while
// they run ready jobs and drain a backlog. Every job still finishes (0
// lost), and the extra executions are at most the jobs in flight in the
// killed processes.
func TestKillWorkerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills worker processes for tens of seconds; -short skips it")
	}
	t.Parallel()
	kills := 20
	if s := os.Getenv(killsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", killsEnv, s)
		}
		kills = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*3*time.Second+2*time.Minute)
	defer cancel()
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	cfg := queue.Config{Name: "kill", Capacity: 100_000, LeakRate: bucket.Rate{Count: 100, Per: time.Second}}
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Enough work to outlast the kills: 2 workers × 4 handlers at ~150 ms
	// a job run ≈ 50 jobs/s, and a kill comes every ~0.7 s.
	total := kills * 40
	ids := make([]string, 0, total)
	for i := range total {
		j := queuetest.NewJob(t, "kill", "k"+strconv.Itoa(i%50))
		dest := queue.Ready
		if i%4 == 0 {
			dest = queue.Backlog // a quarter goes through the drain
		}
		if _, err := pub.Publish(ctx, dest, j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}

	path := filepath.Join(t.TempDir(), "ledger")
	ccfg := childConfig{NATS: srv.URL(), Queue: cfg, Concurrency: 4, AckWait: 3 * time.Second, MaxAttempts: 1000, Work: 100 * time.Millisecond, Ledger: path}
	workers := []*child{startChild(t, ccfg), startChild(t, ccfg)}
	inFlightAtKills, emptyKills := 0, 0
	for range kills {
		victim := rand.IntN(len(workers))
		pid := workers[victim].cmd.Process.Pid
		// Kill mid-job: wait until the victim has jobs running, then a
		// random moment more.
		waitLedger(t, path, 30*time.Second, "the victim to run jobs", func(l *ledger) bool { return l.inFlight(pid) > 0 })
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		workers[victim].kill9()
		n := readLedger(t, path).inFlight(pid)
		if n == 0 {
			emptyKills++
		}
		inFlightAtKills += n
		workers[victim] = startChild(t, ccfg)
	}
	// Done when both streams are empty: a job leaves them only when a
	// worker acks it after its handler succeeded, or after dead-lettering
	// it. (The ledger's ack line can miss a job whose worker was killed
	// right after the ack, so it is not the test of completion.)
	deadline := time.Now().Add(2 * time.Minute)
	for queuetest.Stored(t, ctx, js, queue.StreamName("kill", queue.Ready))+queuetest.Stored(t, ctx, js, queue.StreamName("kill", queue.Backlog)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("jobs still waiting 2 minutes after the last kill")
		}
		time.Sleep(100 * time.Millisecond)
	}
	l := readLedger(t, path)
	executions, dead, lost := 0, 0, 0
	for _, id := range ids {
		executions += len(l.starts[id])
		dead += l.dead[id]
		if l.done[id] == 0 && l.dead[id] == 0 {
			lost++ // gone from the streams, never run to the end
		}
	}
	extra := executions - total
	t.Logf("%d kills (%d with nothing in flight), %d jobs: %d lost, %d executions, %d extra (≤ %d in flight at the kills), %d dead-lettered",
		kills, emptyKills, total, lost, executions, extra, inFlightAtKills, dead)
	if lost != 0 {
		t.Errorf("%d jobs left the streams without a handler finishing them", lost)
	}
	if extra > inFlightAtKills {
		t.Errorf("%d extra executions, more than the %d jobs in flight at the kills", extra, inFlightAtKills)
	}
	if dead != 0 {
		t.Errorf("%d jobs dead-lettered: kills should cost retries, not jobs", dead)
	}
}
