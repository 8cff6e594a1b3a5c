package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// recorder keeps a worker's events and the handler's calls, and lets a
// test wait for a condition on them without sleeping.
type recorder struct {
	mu      sync.Mutex
	events  []worker.Event
	starts  map[string][]time.Time // job id → handler calls
	order   []string               // job ids in the order handlers started
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{starts: map[string][]time.Time{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) observe(e worker.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) started(j *queue.Job) {
	r.mu.Lock()
	r.starts[j.ID] = append(r.starts[j.ID], time.Now())
	r.order = append(r.order, j.ID)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) count(kind worker.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// waitFor waits until cond holds, failing the test after d.
func (r *recorder) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond) // for conditions on JetStream's state
	defer poll.Stop()
	for !cond() {
		select {
		case <-r.changed:
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("after %v: still waiting for %s", d, what)
		}
	}
}

// Admitted jobs each run exactly once, as fast as the concurrency allows,
// and leave the stream when acked.
func TestWorkerRunsReadyJobsOnce(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("ready"))
	rec := newRecorder()
	var running, peak atomic.Int64
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 8, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		rec.started(j)
		if j.Attempt != 1 || string(j.Payload) != "payload of "+j.ID || j.Key == "" {
			return retry.Permanent(fmt.Errorf("job arrived as %+v", j))
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	var jobs []*queue.Job
	for i := range 100 {
		jobs = append(jobs, queuetest.NewJob(t, "ready", "k"+strconv.Itoa(i%7)))
	}
	if ok, _, _, other := b.PublishAll(ctx, queue.Ready, jobs); ok != len(jobs) {
		t.Fatalf("published %d of %d: %v", ok, len(jobs), other)
	}
	rec.waitFor(t, 30*time.Second, "100 successes", func() bool { return rec.count(worker.Succeeded) == 100 })
	for _, j := range jobs {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("job %s ran %d times", j.ID, n)
		}
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("ready", queue.Ready)); n != 0 {
		t.Errorf("%d jobs left in READY after all were acked", n)
	}
	if p := peak.Load(); p < 2 || p > 8 {
		t.Errorf("peak concurrency %d, want between 2 and the configured 8", p)
	}
	if n := rec.count(worker.DeadLettered); n != 0 {
		t.Errorf("%d jobs dead-lettered", n)
	}
}

// fixedRand takes off the same jitter every time: Int64N(n) = n/2.
type fixedRand struct{}

func (fixedRand) Int64N(n int64) int64 { return n / 2 }

// A job that always fails is tried exactly MaxAttempts times, each retry
// no sooner than the jittered backoff, then lands once in DEAD with its id,
// headers, attempts and last error, and leaves READY.
func TestPoisonJobIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("poison"))
	rec := newRecorder()
	policy := retry.Policy{MaxAttempts: 4, Initial: 200 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Retry: policy, Rand: fixedRand{}, Observe: rec.observe},
		func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			if j.Key == "good" {
				return nil
			}
			return fmt.Errorf("downstream said no\r\nto attempt %d", j.Attempt)
		})
	poison := queuetest.NewJob(t, "poison", "bad")
	poison.Header = map[string][]string{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	good := queuetest.NewJob(t, "poison", "good")
	for _, j := range []*queue.Job{poison, good} {
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitFor(t, 20*time.Second, "the poison job in DEAD", func() bool { return rec.count(worker.DeadLettered) == 1 })

	rec.mu.Lock()
	tries := rec.starts[poison.ID]
	rec.mu.Unlock()
	if len(tries) != policy.MaxAttempts {
		t.Fatalf("poison job tried %d times, want %d", len(tries), policy.MaxAttempts)
	}
	for i := 1; i < len(tries); i++ {
		// Delay(i) with half the 50% jitter taken off (fixedRand): 0.75×.
		want := policy.Delay(i) * 3 / 4
		if gap := tries[i].Sub(tries[i-1]); gap < want || gap > want+2*time.Second {
			t.Errorf("try %d came %v after try %d, want %v (the schedule) and not seconds later", i+1, gap, i, want)
		}
	}
	if rec.count(worker.Retrying) != policy.MaxAttempts-1 || rec.count(worker.Succeeded) != 1 {
		t.Errorf("events: %d retrying, %d succeeded; want %d and 1", rec.count(worker.Retrying), rec.count(worker.Succeeded), policy.MaxAttempts-1)
	}

	dead := deadLetters(t, ctx, b.JS, "poison")
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	for h, want := range map[string]string{
		spillway.HeaderJobID:     poison.ID,
		spillway.HeaderKey:       "bad",
		spillway.HeaderAttempt:   "4",
		queue.HeaderDeadReason:   "attempts exhausted (4 of 4)",
		queue.HeaderLastError:    "downstream said no  to attempt 4",
		queue.HeaderSourceStream: queue.StreamName("poison", queue.Ready),
		"Traceparent":            poison.Header["Traceparent"][0],
	} {
		if got := d.Header.Get(h); got != want {
			t.Errorf("dead letter header %s = %q, want %q", h, got, want)
		}
	}
	if string(d.Data) != string(poison.Payload) {
		t.Errorf("dead letter payload %q, want %q", d.Data, poison.Payload)
	}
	if d.Subject != queue.Subject("poison", queue.Dead, "bad") {
		t.Errorf("dead letter subject %s, want %s", d.Subject, queue.Subject("poison", queue.Dead, "bad"))
	}
	rec.waitFor(t, 5*time.Second, "READY empty", func() bool {
		return queuetest.Stored(t, ctx, b.JS, queue.StreamName("poison", queue.Ready)) == 0
	})
}

// deadLetters reads every message of a queue's DEAD stream.
func deadLetters(t *testing.T, ctx context.Context, js jetstream.JetStream, q string) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(ctx, queue.StreamName(q, queue.Dead))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// retry.Permanent skips the remaining tries; a panic is a failed try.
func TestPermanentErrorsAndPanics(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("perm"))
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Retry: retry.Policy{MaxAttempts: 2, Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}, Observe: rec.observe},
		func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			if j.Key == "permanent" {
				return retry.Permanent(errors.New("malformed address"))
			}
			panic("handler bug on attempt " + strconv.Itoa(j.Attempt))
		})
	perm, boom := queuetest.NewJob(t, "perm", "permanent"), queuetest.NewJob(t, "perm", "panics")
	for _, j := range []*queue.Job{perm, boom} {
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitFor(t, 20*time.Second, "2 dead letters", func() bool { return rec.count(worker.DeadLettered) == 2 })
	if n := len(rec.starts[perm.ID]); n != 1 {
		t.Errorf("permanent failure tried %d times, want 1", n)
	}
	if n := len(rec.starts[boom.ID]); n != 2 {
		t.Errorf("panicking job tried %d times, want 2", n)
	}
	reasons := map[string]string{}
	for _, d := range deadLetters(t, ctx, b.JS, "perm") {
		reasons[d.Header.Get(spillway.HeaderJobID)] = d.Header.Get(queue.HeaderDeadReason) + ": " + d.Header.Get(queue.HeaderLastError)
	}
	if want := "permanent error: permanent: malformed address"; reasons[perm.ID] != want {
		t.Errorf("permanent job: %q, want %q", reasons[perm.ID], want)
	}
	if want := "attempts exhausted (2 of 2): handler panicked: handler bug on attempt 2"; reasons[boom.ID] != want {
		t.Errorf("panicking job: %q, want %q", reasons[boom.ID], want)
	}
}

// A handler that runs for several ack waits keeps its job with heartbeats:
// no other worker gets it meanwhile.
func TestHeartbeatsKeepLongJobs(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("slow"))
	rec := newRecorder()
	cfg := worker.WorkerConfig{Queue: b.Config, AckWait: 400 * time.Millisecond, Observe: rec.observe}
	h := func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		time.Sleep(2 * time.Second) // five ack waits
		return nil
	}
	queuetest.RunWorker(t, b.JS, cfg, h)
	queuetest.RunWorker(t, b.JS, cfg, h) // a second worker that would take a lapsed job
	jobs := []*queue.Job{queuetest.NewJob(t, "slow", "a"), queuetest.NewJob(t, "slow", "b"), queuetest.NewJob(t, "slow", "c")}
	if ok, _, _, other := b.PublishAll(ctx, queue.Ready, jobs); ok != 3 {
		t.Fatal(other)
	}
	rec.waitFor(t, 20*time.Second, "3 successes", func() bool { return rec.count(worker.Succeeded) == 3 })
	for _, j := range jobs {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("job %s ran %d times, want once", j.ID, n)
		}
	}
}

// Stopping lets running handlers finish within the grace period and acks
// them; a handler still running when it ends is canceled and its job
// handed back, to run again on another worker.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("stop"))
	rec := newRecorder()
	release := make(chan struct{})
	first := worker.WorkerConfig{Queue: b.Config, GracePeriod: 700 * time.Millisecond, Observe: rec.observe}
	stop := queuetest.RunWorker(t, b.JS, first, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		if j.Key == "quick" {
			<-release
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		<-ctx.Done() // outlives the grace period
		return ctx.Err()
	})
	quick, stuck := queuetest.NewJob(t, "stop", "quick"), queuetest.NewJob(t, "stop", "stuck")
	if ok, _, _, other := b.PublishAll(ctx, queue.Ready, []*queue.Job{quick, stuck}); ok != 2 {
		t.Fatal(other)
	}
	rec.waitFor(t, 10*time.Second, "both running", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.order) == 2 })
	close(release)
	stop()
	if rec.count(worker.Succeeded) != 1 || rec.count(worker.HandedBack) != 1 {
		t.Fatalf("after stop: %d succeeded, %d handed back; want 1 and 1", rec.count(worker.Succeeded), rec.count(worker.HandedBack))
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("stop", queue.Ready)); n != 1 {
		t.Fatalf("READY holds %d jobs after the stop, want the handed-back one", n)
	}
	// Another worker picks the handed-back job up at once, not after the
	// ack wait.
	second := newRecorder()
	began := time.Now()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: second.observe}, func(ctx context.Context, j *queue.Job) error {
		second.started(j)
		return nil
	})
	second.waitFor(t, 10*time.Second, "the handed-back job", func() bool { return second.count(worker.Succeeded) == 1 })
	if waited := time.Since(began); waited > worker.DefaultAckWait/2 {
		t.Errorf("handed-back job took %v to run again: it waited for the ack wait", waited)
	}
	if _, ok := second.starts[stuck.ID]; !ok {
		t.Errorf("second worker ran %v, want the stuck job %s", second.order, stuck.ID)
	}
}

// A message on a queue's subject that is not a job is dead-lettered with
// reason "invalid job", not dropped and not retried forever.
// A worker told to stop while it is still starting (its streams and
// consumers being made sure of) has pulled nothing: that is a graceful
// stop, and Run says nil — as for a worker stopped later — while an error
// that keeps it from starting, such as a closed connection, is returned.
func TestRunStoppedWhileStartingReturnsNil(t *testing.T) {
	t.Parallel()
	_, b := queuetest.StartQueue(t, queuetest.QueueConfig("early"))
	handler := func(context.Context, *queue.Job) error { return nil }
	w, err := worker.NewWorker(b.JS, worker.WorkerConfig{Queue: b.Config}, handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run with its context ended before it started: %v; want nil", err)
	}

	nc, err := nats.Connect(b.Server.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if w, err = worker.NewWorker(js, worker.WorkerConfig{Queue: b.Config}, handler); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("Run on a closed connection: nil; want the error that kept it from starting")
	} else {
		t.Logf("Run on a closed connection: %v", err)
	}
}

func TestInvalidMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("junk"))
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		t.Errorf("handler called for %+v", j)
		return nil
	})
	if _, err := b.JS.Publish(ctx, "spillway.ready.junk.sometoken", []byte("not a job")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 10*time.Second, "the dead letter", func() bool { return rec.count(worker.DeadLettered) == 1 })
	dead := deadLetters(t, ctx, b.JS, "junk")
	if len(dead) != 1 || dead[0].Header.Get(queue.HeaderDeadReason) != "invalid job" || string(dead[0].Data) != "not a job" ||
		dead[0].Header.Get(queue.HeaderLastError) != "queue: invalid job: header Spillway-Job-Id is missing" {
		t.Fatalf("dead letters: %+v", dead)
	}
}

// The zero WorkerConfig is refused for want of a leak rate; every bad
// field is named.
func TestWorkerConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	q := queuetest.QueueConfig("cfg")
	for _, tc := range []struct {
		cfg  worker.WorkerConfig
		want string
	}{
		{worker.WorkerConfig{Queue: queue.Config{Name: "cfg"}}, "leak_rate is not set"},
		{worker.WorkerConfig{Queue: q, Concurrency: -1}, "concurrency -1"},
		{worker.WorkerConfig{Queue: q, AckWait: time.Millisecond}, "ack_wait 1ms"},
		{worker.WorkerConfig{Queue: q, Concurrency: 32, MaxAckPending: 8}, "max_ack_pending 8 is below concurrency 32"},
		{worker.WorkerConfig{Queue: q, GracePeriod: -time.Second}, "grace_period -1s"},
		{worker.WorkerConfig{Queue: q, Retry: retry.Policy{Jitter: 2}}, "retry: retry: invalid policy: jitter 2"},
		{worker.WorkerConfig{Queue: queue.Config{Name: "cfg", LeakRate: bucket.Rate{Count: 5}}}, "leak_rate 5/0s"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, queue.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig naming %q", tc.cfg, err, tc.want)
		}
	}
	js := queuetest.Start(t).JetStream(t)
	if _, err := worker.NewWorker(js, worker.WorkerConfig{Queue: q}, nil); !errors.Is(err, queue.ErrInvalidConfig) {
		t.Errorf("nil handler: %v", err)
	}
}

// A job replayed from DEAD (same job id, a new Nats-Msg-Id) that dies again
// within the duplicate window gets a second dead letter: the dead letter's
// message id is its source place, not the job id, so it is not dropped as
// a duplicate of the first — and the job is never acked into nowhere.
func TestReplayedJobThatDiesAgainIsDeadLetteredAgain(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("again"))
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe},
		func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			return retry.Permanent(errors.New("still broken"))
		})
	j := queuetest.NewJob(t, "again", "k")
	if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 20*time.Second, "the first dead letter", func() bool { return rec.count(worker.DeadLettered) == 1 })
	first := deadLetters(t, ctx, b.JS, "again")
	if len(first) != 1 {
		t.Fatalf("%d dead letters, want 1", len(first))
	}
	// Replay as spillctl does: the same job, a new message id.
	m := nats.NewMsg(queue.Subject("again", queue.Ready, j.Key))
	for k, vs := range first[0].Header {
		if !strings.HasPrefix(k, "Nats-") && !strings.HasPrefix(k, "Spillway-Dead") {
			m.Header[k] = vs
		}
	}
	m.Header.Set(spillway.HeaderAttempt, "0")
	m.Header.Set(nats.MsgIdHdr, j.ID+":replay:1")
	m.Data = first[0].Data
	if _, err := b.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 20*time.Second, "the second dead letter", func() bool { return rec.count(worker.DeadLettered) == 2 })
	dead := deadLetters(t, ctx, b.JS, "again")
	if len(dead) != 2 {
		t.Fatalf("%d dead letters after the replay died again, want 2 (the second was dropped as a duplicate: the job is lost)", len(dead))
	}
	for _, d := range dead {
		if id := d.Header.Get(spillway.HeaderJobID); id != j.ID {
			t.Errorf("dead letter of job %q, want %q", id, j.ID)
		}
	}
}

// When the grace period runs out, every job still running is handed back,
// even one whose handler returns the moment its context ends: the worker
// claims the jobs before it cancels the handlers, so none is settled as a
// failed try (an attempt spent, a retry delay) instead.
func TestGraceOverHandsBackHandlersThatReturnOnCancel(t *testing.T) {
	t.Parallel()
	const n = 16
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("grace"))
	rec := newRecorder()
	stop := queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: n, GracePeriod: 200 * time.Millisecond, Observe: rec.observe},
		func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			<-ctx.Done()
			return ctx.Err()
		})
	for i := range n {
		if _, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "grace", fmt.Sprint("k", i))); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitFor(t, 10*time.Second, "every job running", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.order) == n })
	stop()
	if got, retried := rec.count(worker.HandedBack), rec.count(worker.Retrying); got != n || retried != 0 {
		t.Errorf("after the grace period: %d handed back, %d settled as failed tries; want %d and 0", got, retried, n)
	}
}
