package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

const depthConfig = `
nats: {url: "%[1]s"}
worker: {concurrency: 16, grace_period: 5s, ack_wait: %[4]s}
queues:
  - name: deep
    limits:
      - {key: global, algorithm: leaky_bucket, rate: 1/s, burst: 1}
    backlog: {capacity: %[3]d, leak_rate: 100/s}
    handler: {http: {url: "%[2]s/deep", timeout: 5s}}
`

// drainDepth is the backlog TestDrainCostIsBoundedByKeys builds: 20,000
// jobs over 1,000 keys by default; SPILLWAY_DRAIN_DEPTH=JOBSxKEYS (make
// drain-depth: 1000000x10000) for more.
func drainDepth(t *testing.T) (jobs, keys int) {
	jobs, keys = 20_000, 1_000
	if v := os.Getenv("SPILLWAY_DRAIN_DEPTH"); v != "" {
		j, k, ok := strings.Cut(v, "x")
		var err1, err2 error
		jobs, err1 = strconv.Atoi(j)
		keys, err2 = strconv.Atoi(k)
		if !ok || err1 != nil || err2 != nil || jobs < keys || keys < 1 {
			t.Fatalf("SPILLWAY_DRAIN_DEPTH=%q: want JOBSxKEYS such as 1000000x10000", v)
		}
	}
	return jobs, keys
}

// TestDrainCostIsBoundedByKeys: a deep backlog that is not due for an hour
// costs the drain next to nothing — its JetStream traffic (everything the
// workers send and receive: pulls, gets, grants, acks, heartbeats, the
// lease) stays under 500 messages a second in all, and each worker's
// memory under 200 MiB, however deep the backlog. Then the leading worker
// is killed with SIGKILL while due jobs arrive: the other takes the lead
// and runs them all, within 2 × the ack wait of the kill.
func TestDrainCostIsBoundedByKeys(t *testing.T) {
	jobs, keys := drainDepth(t)
	ackWait := 5 * time.Second
	if jobs > 100_000 {
		ackWait = worker.DefaultAckWait
	}
	ns := queuetest.Start(t)
	hook := newWebhook(t)
	cfgPath := writeFile(t, "spillway.yaml", fmt.Sprintf(depthConfig, ns.URL(), hook.srv.URL, jobs+10_000, ackWait))
	cfg := queue.Config{Name: "deep", Capacity: int64(jobs + 10_000), LeakRate: bucket.Rate{Count: 100, Per: time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	js := ns.JetStream(t)
	if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	notBefore := began.Add(time.Hour)
	publishAll(t, ctx, pub, jobs, func(i int) *queue.Job {
		return &queue.Job{Queue: "deep", Key: "tenant-" + strconv.Itoa(i%keys), Cost: 1, EnqueuedAt: time.Now(), NotBefore: notBefore}
	})
	figure(t, "backlog: %d jobs over %d keys, not due for an hour, published in %v", jobs, keys, time.Since(began).Round(time.Millisecond))

	workers := []*process{
		start(t, "worker0", bins.worker, "--config", cfgPath, "--metrics-listen", "127.0.0.1:0"),
		start(t, "worker1", bins.worker, "--config", cfgPath, "--metrics-listen", "127.0.0.1:0"),
	}
	// The lead's first look at the backlog — one read per key — is done
	// once the leader has read every key: wait until the traffic settles.
	indexed := time.Now()
	var in0, out0 int64
	waitFor(t, 5*time.Minute, "the drain's traffic to settle after the leader's first look", func() bool {
		in, out, n, err := ns.Traffic("spillway-worker")
		if err != nil || n != 2 {
			return false
		}
		settled := in+out-in0-out0 < 2000 && in0+out0 > 0
		in0, out0 = in, out
		if !settled {
			time.Sleep(time.Second)
		}
		return settled
	})
	figure(t, "the leader's first look at %d keys took about %v", keys, time.Since(indexed).Round(time.Second))

	window := 20 * time.Second
	if full() {
		window = time.Minute
	}
	in0, out0, _, _ = ns.Traffic("spillway-worker")
	time.Sleep(window)
	in1, out1, _, err := ns.Traffic("spillway-worker")
	if err != nil {
		t.Fatal(err)
	}
	perSec := float64(in1+out1-in0-out0) / window.Seconds()
	figure(t, "drain traffic with %d jobs waiting: %.1f JetStream messages/s in total (2 workers, over %v)", jobs, perSec, window)
	if perSec > 500 {
		t.Errorf("the drain's JetStream traffic is %.0f messages/s with a waiting backlog; want ≤ 500", perSec)
	}
	for _, w := range workers {
		rss, err := soakRSS(w.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		figure(t, "%s RSS: %.1f MiB", w.name, float64(rss)/1024)
		if rss > 200*1024 {
			t.Errorf("%s: RSS %.1f MiB; want ≤ 200 MiB", w.name, float64(rss)/1024)
		}
	}

	// Kill the leader; due jobs arrive; the survivor leads and runs them.
	leader := leaderOf(t, workers)
	leader.signal(syscall.SIGKILL)
	killed := time.Now()
	const due = 200
	publishAll(t, ctx, pub, due, func(i int) *queue.Job {
		return &queue.Job{Queue: "deep", Key: "due-" + strconv.Itoa(i%20), Cost: 1, EnqueuedAt: time.Now()}
	})
	waitFor(t, 2*ackWait+10*time.Second, "the due jobs to run on the surviving worker", func() bool {
		return len(hook.countByID()) >= due
	})
	took := time.Since(killed)
	figure(t, "after SIGKILL of the leading worker, %d due jobs ran in %v (ack wait %v; leak 100/s alone takes %v)", due, took.Round(time.Millisecond), ackWait, time.Duration(due)*10*time.Millisecond)
	if took > 2*ackWait+due*10*time.Millisecond {
		t.Errorf("the due jobs took %v after the kill; want within 2 × ack wait (%v) plus their leak time", took, 2*ackWait)
	}
	for id, n := range hook.countByID() {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
}

// leaderOf is the worker that leads the drain, as its log says: the last
// of its lines about the lead says it leads.
func leaderOf(t *testing.T, workers []*process) *process {
	t.Helper()
	for _, w := range workers {
		b, err := os.ReadFile(w.log)
		if err != nil {
			continue
		}
		log := string(b)
		if i := strings.LastIndex(log, "leading the backlog's drain"); i >= 0 && !strings.HasSuffix(log[:i], "no longer ") {
			return w
		}
	}
	t.Fatal("no worker logged that it leads the drain")
	return nil
}

// publishAll publishes n jobs made by job(i), many at once.
func publishAll(t *testing.T, ctx context.Context, pub *queue.Publisher, n int, job func(i int) *queue.Job) {
	t.Helper()
	errs := make(chan error, 64)
	sem := make(chan struct{}, 256)
	for i := range n {
		j := job(i)
		id, err := queue.NewJobID("deep")
		if err != nil {
			t.Fatal(err)
		}
		j.ID = id
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			if _, err := pub.Publish(ctx, queue.Backlog, j); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	select {
	case err := <-errs:
		t.Fatalf("publishing: %v", err)
	default:
	}
}
