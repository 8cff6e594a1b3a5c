package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Two workers drain a backlog at 20/s through a shared pacer. A pause
// (docs/design.md#pause) stops every start — the backlog's and READY's,
// including jobs admitted while paused — from a second after it until the
// resume; after the resume the backlog starts at the leak rate again,
// within 1% with the machine to itself (queuetest.CheckDrainRate); every job runs
// exactly once, as its first try: nothing failed.
func TestPauseStopsStartsUntilResume(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15 s of draining; -short skips it")
	}
	t.Parallel()
	const backlogJobs, readyJobs, workers = 260, 20, 2
	cfg := queuetest.QueueConfig("paused")
	cfg.LeakRate = bucket.Rate{Count: 20, Per: time.Second}
	ctx, b := queuetest.StartQueue(t, cfg)
	kv, err := pace.OpenPacerBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		starts   = map[string][]time.Time{}
		notFirst []string // jobs that ran as a later try than their first
	)
	handler := func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		starts[j.ID] = append(starts[j.ID], time.Now())
		if j.Attempt != 1 {
			notFirst = append(notFirst, fmt.Sprintf("%s as attempt %d", j.ID, j.Attempt))
		}
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
		queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Pacer: yp, Observe: rec.observe}, handler)
	}
	backlog := map[string]bool{}
	for i := range backlogJobs {
		for _, j := range publishBacklog(t, ctx, b, fmt.Sprintf("k%02d", i%10), 1, time.Time{}) {
			backlog[j.ID] = true
		}
	}
	rec.waitFor(t, 30*time.Second, "40 backlog jobs started", func() bool { return count() >= 40 })

	pausedAt := time.Now()
	if err := pace.SetPause(ctx, b.JS, cfg.Name, 1, pace.PauseState{Paused: true, At: pausedAt, By: "test", Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	// Admitted while paused: they wait too.
	var ready []string
	for range readyJobs {
		j := queuetest.NewJob(t, cfg.Name, "r")
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		ready = append(ready, j.ID)
	}
	time.Sleep(4 * time.Second)
	st, err := pace.ReadPause(ctx, b.JS, cfg.Name)
	if err != nil || !st.Paused || st.By != "test" || st.Reason != "maintenance" {
		t.Fatalf("ReadPause = %+v, %v; want paused by test for maintenance", st, err)
	}
	resumedAt := time.Now()
	if err := pace.SetPause(ctx, b.JS, cfg.Name, 1, pace.PauseState{At: resumedAt, By: "test"}); err != nil {
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
	if len(notFirst) != 0 {
		t.Errorf("jobs ran as a later try although none failed: %v", notFirst)
	}
	slices.SortFunc(after, time.Time.Compare)
	if len(after) < 100 {
		t.Fatalf("only %d backlog starts after the resume; want at least 100 to measure the rate", len(after))
	}
	span := after[len(after)-1].Sub(after[0])
	rate := float64(len(after)-1) / span.Seconds()
	t.Logf("pause %v: 0 starts wanted, %d seen; after the resume %d backlog starts at %.3f/s over %v (%.2f%% off 20/s); first start %v after the resume",
		resumedAt.Sub(pausedAt).Round(time.Millisecond), during, len(after), rate, span.Round(time.Millisecond), 100*(rate/20-1), after[0].Sub(resumedAt).Round(time.Millisecond))
	queuetest.CheckDrainRate(t, "backlog starts after the resume", rate, 20)
}

// A READY job that reaches a worker after the pause — its pull was open
// when the pause came — waits in that worker for the resume, kept alive
// with heartbeats, and then runs as its first try. Handed back, it would
// go straight to the pull still open (this worker's or another's) and
// back, each delivery counting as a try: a job admitted as the pause came
// could use up its tries and be dead-lettered without ever running. The
// worker's answers to JetStream, seen on the ack subjects, tell a hold
// (+WPI) from a hand-back (-NAK) without a race.
func TestPauseHoldsReadyJobPulledAfterThePause(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("pausepull")
	ctx, b := queuetest.StartQueue(t, cfg)
	rec := newRecorder()
	logs := newPauseLog()
	var (
		mu       sync.Mutex
		attempts = map[string][]int{}
	)
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{
		Queue: b.Config, Concurrency: 1, AckWait: 3 * time.Second, FetchWait: 5 * time.Second,
		Logger: slog.New(logs), Observe: rec.observe,
	}, func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		attempts[j.ID] = append(attempts[j.ID], j.Attempt)
		mu.Unlock()
		return nil
	})
	// A first job, done, makes the worker open a new pull at once (its
	// one handler is free again): the pull is fresh, open for FetchWait.
	first := queuetest.NewJob(t, cfg.Name, "r")
	if _, err := b.Pub.Publish(ctx, queue.Ready, first); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 10*time.Second, "the first job done", func() bool { return rec.count(worker.Succeeded) == 1 })
	cons, err := b.JS.Consumer(ctx, queue.StreamName(cfg.Name, queue.Ready), worker.ReadyConsumer)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 10*time.Second, "the worker's next pull open", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	acks := make(chan string, 64)
	nc := b.JS.Conn()
	// The worker's answers to the job: +WPI for a heartbeat, -NAK for
	// a hand-back, +ACK when done.
	sub, err := nc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, "."+queue.StreamName(cfg.Name, queue.Ready)+".") {
			select {
			case acks <- string(m.Data):
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	if err := pace.SetPause(ctx, b.JS, cfg.Name, 1, pace.PauseState{Paused: true, At: time.Now(), By: "test"}); err != nil {
		t.Fatal(err)
	}
	logs.wait(t, "queue paused")
	j := queuetest.NewJob(t, cfg.Name, "r")
	if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-acks:
		if !strings.HasPrefix(a, "+WPI") {
			t.Fatalf("the worker answered %q to a READY job pulled while paused; want it held with heartbeats (+WPI), not handed back", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("after 10s: the worker neither held nor handed back the READY job pulled while paused")
	}
	if n := rec.count(worker.Started); n != 1 {
		t.Fatalf("%d starts while paused, want 0", n-1)
	}

	if err := pace.SetPause(ctx, b.JS, cfg.Name, 1, pace.PauseState{At: time.Now(), By: "test"}); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 10*time.Second, "the job done after the resume", func() bool { return rec.count(worker.Succeeded) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got := attempts[j.ID]; !slices.Equal(got, []int{1}) {
		t.Errorf("the job pulled while paused ran as attempts %v, want once as attempt 1", got)
	}
	if n := rec.count(worker.DeadLettered); n != 0 {
		t.Errorf("%d jobs dead-lettered, want 0", n)
	}
}

// pauseLog is a slog.Handler that tells a test when a worker logged a
// message, so that it waits for the worker to see a pause without
// sleeping.
type pauseLog struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func newPauseLog() *pauseLog { return &pauseLog{seen: map[string]chan struct{}{}} }

func (l *pauseLog) ch(msg string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.seen[msg]
	if !ok {
		c = make(chan struct{})
		l.seen[msg] = c
	}
	return c
}

// wait waits until a message beginning with msg was logged.
func (l *pauseLog) wait(t *testing.T, msg string) {
	t.Helper()
	select {
	case <-l.ch(msg):
	case <-time.After(10 * time.Second):
		t.Fatalf("after 10s: the worker has not logged %q", msg)
	}
}

func (l *pauseLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *pauseLog) Handle(_ context.Context, r slog.Record) error {
	for _, msg := range []string{"queue paused", "queue resumed"} {
		if strings.HasPrefix(r.Message, msg) {
			c := l.ch(msg)
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}
	return nil
}

func (l *pauseLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *pauseLog) WithGroup(string) slog.Handler      { return l }
