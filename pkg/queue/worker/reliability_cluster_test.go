package worker_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// clusterScale is short in the default run and long under `make
// reliability` (SPILLWAY_RELIABILITY=full), as test/e2e's scale.
func clusterScale(short, long int) int {
	if os.Getenv("SPILLWAY_RELIABILITY") == "full" {
		return long
	}
	return short
}

// clLedger is both ledgers of TestReliabilityClusterLeaderLoss: every
// publish attempt and its outcome, and every handler execution.
type clLedger struct {
	mu       sync.Mutex
	acked    map[string]time.Time // job id → when JetStream acknowledged it
	dest     map[string]queue.Destination
	seq      map[string]uint64
	attempts []clAttempt
	runs     map[string]int
	lastRun  time.Time
}

type clAttempt struct {
	began, ended time.Time
	err          error
}

func (l *clLedger) attempt(a clAttempt, id string, d queue.Destination, st queue.Stored) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts = append(l.attempts, a)
	if a.err == nil {
		l.acked[id] = a.ended
		l.dest[id] = d
		l.seq[id] = st.Sequence
	}
}

func (l *clLedger) ran(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[id]++
	l.lastRun = time.Now()
}

// since is what happened to publishes begun at or after t: how many
// failed before the first success, and when that success was acknowledged
// (zero if none yet).
func (l *clLedger) since(t time.Time) (failed int, firstOK time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fails []time.Time
	for _, a := range l.attempts {
		if a.began.Before(t) {
			continue
		}
		if a.err == nil {
			if firstOK.IsZero() || a.ended.Before(firstOK) {
				firstOK = a.ended
			}
			continue
		}
		fails = append(fails, a.ended)
	}
	for _, f := range fails {
		if firstOK.IsZero() || f.Before(firstOK) {
			failed++
		}
	}
	return failed, firstOK
}

// ranAckedAfter reports whether a job acknowledged after t has run.
func (l *clLedger) ranAckedAfter(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, at := range l.acked {
		if at.After(t) && l.runs[id] > 0 {
			return true
		}
	}
	return false
}

func (l *clLedger) counts() (acked, ran int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.runs)
}

// TestReliabilityClusterLeaderLoss: a 3-node JetStream
// cluster with R3 streams; under load — a Publisher publishing, a Worker
// running jobs, both in this process on connections that know the three
// URLs — the READY stream's leader is shut down 3 times (20 under `make
// reliability`), and restarted on its store once another node leads, then
// given time to catch up before the next loss. Every job JetStream
// acknowledged runs (0 lost); each loss's publish error window — from the
// shutdown to the first publish acknowledged after it — is reported; the
// worker, never restarted, runs jobs published after each loss.
func TestReliabilityClusterLeaderLoss(t *testing.T) {
	t.Parallel()
	events := clusterScale(3, 20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(events)*time.Minute+2*time.Minute)
	defer cancel()

	c := queuetest.StartCluster(t, 3)
	js := c.JetStream(t)
	cfg := queue.Config{Name: "r3", Replicas: 3, Capacity: 100_000, LeakRate: bucket.Rate{Count: 500, Per: time.Second}}
	// Each try has 15 s: a request lost in the young cluster is never
	// answered, and the test's context is minutes long.
	for {
		ectx, ecancel := context.WithTimeout(ctx, 15*time.Second)
		err := queue.EnsureStreams(ectx, js, cfg)
		ecancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		t.Logf("creating the streams, again: %v", err)
	}
	streams := []string{queue.StreamName("r3", queue.Ready), queue.StreamName("r3", queue.Backlog), queue.StreamName("r3", queue.Dead)}

	l := &clLedger{acked: map[string]time.Time{}, dest: map[string]queue.Destination{}, seq: map[string]uint64{}, runs: map[string]int{}}
	w, err := worker.NewWorker(c.JetStream(t), worker.WorkerConfig{
		Queue: cfg, Concurrency: 8, AckWait: 2 * time.Second, FetchWait: 250 * time.Millisecond,
		Retry: retry.Policy{MaxAttempts: 1000, Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}, func(_ context.Context, j *queue.Job) error {
		l.ran(j.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-workerDone; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	// The worker has created its consumers once they appear. Each look has
	// a deadline of its own: a request lost in the young cluster is never
	// answered, and ctx's deadline is minutes away (a run in CI once spent
	// 270 s in one such look).
	waitCluster(t, time.Minute, "the worker's consumers", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Consumer(rctx, queue.GrantsStreamName("r3"), worker.GrantsConsumer)
		return err == nil
	})
	for _, s := range streams {
		c.WaitCurrent(t, js, s, time.Minute)
	}

	// Producers: each publishes a job every 10 ms (≈ 300/s in all, a
	// quarter to the backlog), and on an error publishes the same job
	// again, as a producer should, until JetStream acknowledges it.
	pub, err := queue.NewPublisher(c.JetStream(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stopProducers := context.WithCancel(ctx)
	var producers sync.WaitGroup
	for p := range 3 {
		producers.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				id, err := queue.NewJobID("r3")
				if err != nil {
					t.Error(err)
					return
				}
				j := &queue.Job{ID: id, Queue: "r3", Key: "k" + strconv.Itoa(p), Cost: 1, Payload: []byte("job " + id), EnqueuedAt: time.Now()}
				dest := queue.Ready
				if i%4 == 0 {
					dest = queue.Backlog
				}
				for {
					select {
					case <-pctx.Done():
						return
					case <-tick.C:
					}
					began := time.Now()
					actx, acancel := context.WithTimeout(pctx, 2*time.Second)
					st, err := pub.Publish(actx, dest, j)
					acancel()
					if pctx.Err() != nil {
						return // ours: neither a success nor the cluster's failure
					}
					l.attempt(clAttempt{began: began, ended: time.Now(), err: err}, j.ID, dest, st)
					if err == nil {
						break
					}
				}
			}
		})
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopProducers()
			producers.Wait()
		}
	}
	t.Cleanup(stop)

	var windows []time.Duration
	var kills []time.Time
	for ev := 1; ev <= events; ev++ {
		acked0, ran0 := l.counts()
		waitCluster(t, 30*time.Second, "load before the loss", func() bool {
			acked, ran := l.counts()
			return acked >= acked0+50 && ran >= ran0+50
		})
		leader := clusterLeader(t, js, streams[0])
		node := c.Node(leader)
		if node == nil {
			t.Fatalf("event %d: READY's leader %q is none of the nodes", ev, leader)
		}
		led := []string{}
		for _, name := range streams[1:] {
			if clusterLeader(t, js, name) == leader {
				led = append(led, name)
			}
		}
		killed := time.Now()
		kills = append(kills, killed)
		node.Shutdown()
		var failed int
		var firstOK time.Time
		waitCluster(t, time.Minute, "a publish acknowledged after the loss", func() bool {
			failed, firstOK = l.since(killed)
			return !firstOK.IsZero()
		})
		window := firstOK.Sub(killed)
		windows = append(windows, window)
		waitCluster(t, time.Minute, "the worker running a job published after the loss", func() bool { return l.ranAckedAfter(killed) })
		resumed := time.Since(killed)
		newLeader := clusterLeader(t, js, streams[0])
		if newLeader == leader || newLeader == "" {
			t.Errorf("event %d: READY's leader is %q with %s down", ev, newLeader, leader)
		}
		restarted := time.Now()
		node.Restart(t)
		for _, name := range streams {
			c.WaitCurrent(t, js, name, 2*time.Minute)
		}
		t.Logf("event %d: %s down (led READY and %v): publish error window %v (%d failed publishes), new leader %s, worker ran a new job %v after the loss; back and current in %v",
			ev, leader, led, window.Round(time.Millisecond), failed, newLeader, resumed.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	}
	stop()

	// Every acknowledged job runs: the worker drains both streams.
	var lost []string
	deadline := time.Now().Add(time.Minute)
	for {
		l.mu.Lock()
		lost = lost[:0]
		for id := range l.acked {
			if l.runs[id] == 0 {
				lost = append(lost, id)
			}
		}
		l.mu.Unlock()
		if len(lost) == 0 {
			break
		}
		if time.Now().After(deadline) {
			clDiagnose(t, js, l, lost, kills)
			t.Fatalf("%d acknowledged jobs have not run a minute after the last loss (lost), e.g. %v", len(lost), lost[:min(5, len(lost))])
		}
		time.Sleep(20 * time.Millisecond)
	}
	dead := int(clusterInfo(t, js, streams[2]).State.Msgs)
	l.mu.Lock()
	acked, extra, failures := len(l.acked), 0, 0
	for id, n := range l.runs {
		if _, ok := l.acked[id]; ok {
			extra += n - 1
		}
	}
	for _, a := range l.attempts {
		if a.err != nil {
			failures++
		}
	}
	var worst time.Duration
	sorted := append([]time.Duration(nil), windows...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	worst = sorted[len(sorted)-1]
	l.mu.Unlock()
	if dead != 0 {
		t.Errorf("%d jobs dead-lettered: a leader loss should cost retries, not jobs", dead)
	}
	t.Logf("figure: %s: %d READY stream leader losses (3 nodes, R3): %d acknowledged jobs, 0 lost, %d extra executions, %d dead-lettered, %d failed publish attempts (retried with the same id)",
		t.Name(), events, acked, extra, dead, failures)
	t.Logf("figure: %s: publish error window per loss (shutdown → first acknowledged publish): median %v, max %v, all %v",
		t.Name(), sorted[len(sorted)/2].Round(time.Millisecond), worst.Round(time.Millisecond), roundAll(windows))
	t.Logf("figure: %s: the publisher and worker were never restarted and ran new jobs after every loss", t.Name())
}

func roundAll(ds []time.Duration) string {
	s := ""
	for i, d := range ds {
		if i > 0 {
			s += " "
		}
		s += d.Round(time.Millisecond).String()
	}
	return s
}

// clDiagnose logs where the jobs that did not run are: their stream,
// sequence and acknowledgement time against the losses, and the streams'
// and consumers' state.
func clDiagnose(t *testing.T, js jetstream.JetStream, l *clLedger, lost []string, kills []time.Time) {
	t.Helper()
	l.mu.Lock()
	for i, id := range lost {
		if i == 20 {
			break
		}
		at := l.acked[id]
		rel := ""
		for k, kt := range kills {
			rel += fmt.Sprintf(" loss%d%+v", k+1, at.Sub(kt).Round(time.Millisecond))
		}
		t.Logf("not run: %s to %s seq %d, acknowledged%s", id, l.dest[id], l.seq[id], rel)
	}
	l.mu.Unlock()
	for _, d := range []queue.Destination{queue.Ready, queue.Backlog} {
		info := clusterInfo(t, js, queue.StreamName("r3", d))
		t.Logf("%s: state %+v cluster leader %s", info.Config.Name, info.State, info.Cluster.Leader)
		stream, name := info.Config.Name, worker.ReadyConsumer
		if d == queue.Backlog {
			stream, name = queue.GrantsStreamName("r3"), worker.GrantsConsumer
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := js.Consumer(ctx, stream, name)
		cancel()
		if err != nil {
			t.Logf("consumer %s: %v", name, err)
			continue
		}
		ci := c.CachedInfo()
		t.Logf("consumer %s: delivered %+v ack floor %+v pending %d ack pending %d redelivered %d waiting %d", name, ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
	}
}

// clusterInfo reads a stream's info, asking again (each try bounded)
// while the cluster does not answer: a request that reaches a node as it
// goes down gets no reply.
func clusterInfo(t *testing.T, js jetstream.JetStream, stream string) *jetstream.StreamInfo {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, stream)
		cancel()
		if err == nil {
			return s.CachedInfo()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no info of stream %s within a minute: %v", stream, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clusterLeader is the node leading stream ("" while none does).
func clusterLeader(t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	if ci := clusterInfo(t, js, stream).Cluster; ci != nil {
		return ci.Leader
	}
	return ""
}

// waitCluster polls cond every 20 ms until it holds or d passes.
func waitCluster(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
