package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// backlogFill stores n jobs of queue q, as the file at path configures it,
// straight into its backlog (no admitter needed): the deep backlog a test
// drains. Keys cycle over 10.
func backlogFill(t *testing.T, natsURL, path, q string, n int) []string {
	t.Helper()
	cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	qc := cfg.Queue(q)
	if qc == nil {
		t.Fatalf("no queue %s in %s", q, path)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, qc.Backlog); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, n)
	for i := range n {
		id, err := queue.NewJobID("a")
		if err != nil {
			t.Fatal(err)
		}
		j := &queue.Job{ID: id, Queue: q, Key: "k" + strconv.Itoa(i%10), Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}
		if _, err := pub.Publish(ctx, queue.Backlog, j); err != nil {
			t.Fatalf("publishing job %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// backlogPullers waits until n workers pull q's backlog, so that a backlog
// published next is shared by all of them.
func backlogPullers(t *testing.T, natsURL, path, q string, n int) {
	t.Helper()
	cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d workers pulling the backlog of %s", n, q), func() bool {
		info, err := admin.Inspect(context.Background(), js, cfg.Queue(q).Backlog)
		return err == nil && info.BacklogPullers >= n
	})
}

// hitTimes are the times the webhook received jobs on path, sorted.
func (w *webhook) hitTimes(path string) []time.Time {
	var ts []time.Time
	for _, h := range w.snapshot() {
		if h.Path == path {
			ts = append(ts, h.At)
		}
	}
	slices.SortFunc(ts, time.Time.Compare)
	return ts
}

// rateIn is how many of ts fall in [from, to), per second.
func rateIn(ts []time.Time, from, to time.Time) float64 {
	n := 0
	for _, at := range ts {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// metric reads one sample of a worker's /metrics (0 if absent).
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	client := apitest.Client(t, &http.Client{Timeout: 5 * time.Second})
	defer client.CloseIdleConnections()
	resp, err := get(client, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// replaceFile rewrites path by rename, as editors do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// workerQueue is a queue of the worker tests' config: its webhook path is
// /<name>.
func workerQueue(name, leak, hook string) string {
	return fmt.Sprintf(`
  - name: %s
    limits: [{key: global, algorithm: leaky_bucket, rate: 10/s, burst: 10}]
    backlog: {capacity: 2000, leak_rate: %s}
    retry: {max_attempts: 3, initial: 100ms, max: 1s}
    handler: {http: {url: "%s/%s", timeout: 5s}}
`, name, leak, hook, name)
}

func workerConfig(natsURL, redisURL string, queues ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nats: {url: %q}\n", natsURL)
	if redisURL != "" {
		fmt.Fprintf(&b, "redis: {url: %q}\n", redisURL)
	}
	b.WriteString("worker: {concurrency: 16, grace_period: 10s}\nqueues:")
	for _, q := range queues {
		b.WriteString(q)
	}
	return b.String()
}

// rateAcross measures the start rate of a drain: (n−1) over the span of the
// first to the last start.
func rateAcross(ts []time.Time) (float64, time.Duration) {
	span := ts[len(ts)-1].Sub(ts[0])
	return float64(len(ts)-1) / span.Seconds(), span
}

// checkOnce fails for a job the webhook saw other than once.
func checkOnce(t *testing.T, hook *webhook, ids []string) {
	t.Helper()
	n := hook.countByID()
	for _, id := range ids {
		if n[id] != 1 {
			t.Errorf("job %s ran %d times, want once", id, n[id])
		}
	}
}

// TestLeakGlobalWithoutRedis: three worker processes with NATS alone drain
// one backlog at the leak rate in total — 20/s, not 3 × 20/s.
func TestLeakGlobalWithoutRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of draining; -short skips it")
	}
	const jobs, leak = 400, 20.0
	srv := queuetest.Start(t)
	hook := newWebhook(t)
	path := writeFile(t, "spillway.yaml", workerConfig(srv.URL(), "", workerQueue("g", "20/s", hook.srv.URL)))
	var workers []*process
	for i := range 3 {
		workers = append(workers, start(t, fmt.Sprintf("worker%d", i), bins.worker, "--config", path, "--metrics-listen", "127.0.0.1:0"))
	}
	backlogPullers(t, srv.URL(), path, "g", 3)
	ids := backlogFill(t, srv.URL(), path, "g", jobs)
	waitFor(t, time.Duration(3*jobs/int(leak))*time.Second, "every job to run", func() bool { return len(hook.hitTimes("/g")) >= jobs })
	rate, span := rateAcross(hook.hitTimes("/g"))
	var per []float64
	for _, w := range workers {
		per = append(per, metric(t, w.addr, `spillway_jobs_completed_total{queue="g",result="succeeded"}`))
	}
	t.Logf("%d jobs, 3 worker processes, no Redis, leak 20/s: %.3f/s over %v (%+.2f%%); jobs per process %v",
		jobs, rate, span.Round(time.Millisecond), 100*(rate/leak-1), per)
	queuetest.CheckDrainRate(t, "the drain across 3 processes", rate, leak)
	busy := 0
	for _, n := range per {
		if n > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("only %d worker process ran jobs (%v): the test did not exercise a shared pacer", busy, per)
	}
	checkOnce(t, hook, ids)
}

// TestLeakRedisKilledMidDrain: with redis.url, three worker processes pace
// in Redis; Redis killed mid-drain does not stop the drain, which goes on
// at no more than the leak rate (paced in JetStream), and nothing is lost
// or run twice.
func TestLeakRedisKilledMidDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of draining; -short skips it")
	}
	const jobs, leak = 400, 20.0
	srv := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	hook := newWebhook(t)
	path := writeFile(t, "spillway.yaml", workerConfig(srv.URL(), rds.URL(), workerQueue("r", "20/s", hook.srv.URL)))
	for i := range 3 {
		start(t, fmt.Sprintf("worker%d", i), bins.worker, "--config", path, "--metrics-listen", "127.0.0.1:0")
	}
	backlogPullers(t, srv.URL(), path, "r", 3)
	ids := backlogFill(t, srv.URL(), path, "r", jobs)
	waitFor(t, 30*time.Second, "100 jobs to run", func() bool { return len(hook.hitTimes("/r")) >= 100 })
	before, _ := rateAcross(hook.hitTimes("/r"))
	killed := time.Now()
	rds.Kill()
	waitFor(t, time.Duration(3*jobs/int(leak))*time.Second, "every job to run after Redis was killed", func() bool { return len(hook.hitTimes("/r")) >= jobs })
	var after []time.Time
	for _, at := range hook.hitTimes("/r") {
		if at.After(killed) {
			after = append(after, at)
		}
	}
	rate, span := rateAcross(after)
	// The drain's rate from the kill: (starts after it − 1) over their span.
	t.Logf("leak 20/s, 3 worker processes: %.3f/s with Redis; Redis killed after %d jobs; then %d jobs at %.3f/s over %v (%+.2f%%)",
		before, jobs-len(after), len(after), rate, span.Round(time.Millisecond), 100*(rate/leak-1))
	if rate > leak*1.01 {
		t.Errorf("after Redis was killed the drain ran at %.3f/s: above the leak rate 20/s (+1%% measuring margin)", rate)
	}
	if rate < leak*0.5 {
		t.Errorf("after Redis was killed the drain ran at %.3f/s: want it to go on near 20/s", rate)
	}
	checkOnce(t, hook, ids)
}

// TestWorkerReloadsConfig: a worker applies a changed file without a
// restart: a leak rate raised from 5/s to 20/s under a deep backlog is
// followed within 2 s; an invalid file is counted and kept out; a queue
// added starts; a queue removed stops after its running jobs finish, its
// backlog left for later; no job runs twice.
func TestWorkerReloadsConfig(t *testing.T) {
	srv := queuetest.Start(t)
	hook := newWebhook(t)
	hook.respond = func(*http.Request, hit) int { time.Sleep(100 * time.Millisecond); return http.StatusOK } // jobs in flight at each change
	qa := func(leak string) string { return workerQueue("a", leak, hook.srv.URL) }
	qb := workerQueue("b", "10/s", hook.srv.URL)
	path := writeFile(t, "spillway.yaml", workerConfig(srv.URL(), "", qa("5/s")))
	// b's streams exist from the start (an admitter would make them), so
	// its backlog waits for a worker.
	bPath := writeFile(t, "b.yaml", workerConfig(srv.URL(), "", qb))
	w := start(t, "worker", bins.worker, "--config", path, "--metrics-listen", "127.0.0.1:0")
	idsA := backlogFill(t, srv.URL(), path, "a", 800)
	idsB := backlogFill(t, srv.URL(), bPath, "b", 30)
	reloads := func(result string) float64 {
		return metric(t, w.addr, `spillway_config_reloads_total{result="`+result+`"}`)
	}

	waitFor(t, 20*time.Second, "the drain at 5/s to start", func() bool { return len(hook.hitTimes("/a")) >= 5 })
	time.Sleep(3 * time.Second) // measured: three seconds at 5/s
	raised := time.Now()
	slow := rateIn(hook.hitTimes("/a"), raised.Add(-3*time.Second), raised)
	replaceFile(t, path, workerConfig(srv.URL(), "", qa("20/s")))
	time.Sleep(time.Until(raised.Add(5 * time.Second)))
	fast := rateIn(hook.hitTimes("/a"), raised.Add(2*time.Second), raised.Add(5*time.Second))
	// When the new rate took over: the first start after which every gap
	// is below the old 200ms spacing.
	var followed time.Duration
	ts := hook.hitTimes("/a")
	for i := len(ts) - 1; i > 0 && ts[i-1].After(raised); i-- {
		if ts[i].Sub(ts[i-1]) >= 150*time.Millisecond {
			break
		}
		followed = ts[i-1].Sub(raised)
	}
	t.Logf("leak 5/s → 20/s: %.2f/s in the 3 s before the change, %.2f/s from 2 s to 5 s after it; the new spacing from %v after the file changed",
		slow, fast, followed.Round(time.Millisecond))
	// Above the leak only by a window's slack. Below it: with the machine
	// to itself by that slack too; in the default run by what a loaded
	// machine loses as well (a starved drain leaks slower, never faster).
	// A worker that did not follow the file would go on at 5/s.
	slowFloor, fastFloor := 3.5, 14.0
	if full() {
		slowFloor, fastFloor = 4, 18
	}
	if slow < slowFloor || slow > 5.5 {
		t.Errorf("before the change: %.2f/s, want 5/s", slow)
	}
	if fast < fastFloor || fast > 21 {
		t.Fatalf("2 to 5 s after raising the leak rate to 20/s the drain ran at %.2f/s: the worker did not follow", fast)
	}
	if n := reloads("success"); n != 1 {
		t.Errorf("spillway_config_reloads_total{result=\"success\"} = %v after one change, want 1", n)
	}

	// An invalid file: counted, logged, kept out.
	replaceFile(t, path, "queues: [{name: a, limits: [{key: global, rate: ten}]}]\n")
	waitFor(t, 10*time.Second, "the invalid file to be counted", func() bool { return reloads("failure") >= 1 })
	kept := time.Now()
	time.Sleep(2 * time.Second)
	if r := rateIn(hook.hitTimes("/a"), kept, kept.Add(2*time.Second)); r < fastFloor {
		t.Errorf("after an invalid file the drain ran at %.2f/s, want the running 20/s", r)
	}
	if b, _ := os.ReadFile(w.log); !strings.Contains(string(b), "config reload failed") {
		t.Error("the invalid file was not logged")
	}

	// Queue b added: its backlog drains.
	replaceFile(t, path, workerConfig(srv.URL(), "", qa("20/s"), qb))
	waitFor(t, 15*time.Second, "queue b's jobs to run after it was added", func() bool { return len(hook.hitTimes("/b")) >= len(idsB) })

	// Queue a removed: its worker stops, its running jobs finish.
	replaceFile(t, path, workerConfig(srv.URL(), "", qb))
	waitFor(t, 10*time.Second, "the removal to be applied", func() bool { return reloads("success") >= 3 })
	time.Sleep(time.Second) // running jobs finish (100ms each)
	stopped := len(hook.hitTimes("/a"))
	time.Sleep(2 * time.Second)
	if n := len(hook.hitTimes("/a")); n != stopped {
		t.Errorf("queue a removed, yet %d of its jobs started afterwards", n-stopped)
	}
	for _, h := range hook.snapshot() {
		if h.Status != http.StatusOK {
			t.Errorf("job %s on %s: still running or answered %d after its queue was removed", h.ID, h.Path, h.Status)
		}
	}
	checkOnce(t, hook, idsB)
	seen := hook.countByID()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	// Every job of a is somewhere: run, released to READY for a future
	// worker, or still in the backlog.
	_, backlog := streamMsgs(t, srv.URL(), queue.StreamName("a", queue.Backlog))
	_, ready := streamMsgs(t, srv.URL(), queue.StreamName("a", queue.Ready))
	if int(backlog.Msgs+ready.Msgs)+stopped != len(idsA) {
		t.Errorf("queue a: %d jobs ran, %d wait in READY and %d in the backlog; want %d in all", stopped, ready.Msgs, backlog.Msgs, len(idsA))
	}
	t.Logf("reloads: %v applied, %v refused; queue a: %d run, %d in READY, %d left in its backlog",
		reloads("success"), reloads("failure"), stopped, ready.Msgs, backlog.Msgs)
	if err := w.stop(20 * time.Second); err != nil {
		t.Error(err)
	}
}
