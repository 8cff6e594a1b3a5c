package worker_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The pacer chains starts exactly 1/rate apart while bookings keep coming,
// starts at once after a pause, and hands concurrent callers distinct
// slots.
func TestPacerSpacesStartsExactly(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	store, err := bucket.NewMemory(bucket.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pace.NewPacer(store, "email", bucket.Rate{Count: 3, Per: time.Second}) // 333,333,333.3 ns apart
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reserve := func() time.Duration {
		t.Helper()
		d, err := p.Reserve(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Timeline: four bookings at once; then one 100ms later; then a pause.
	var got []time.Duration
	for range 4 {
		got = append(got, reserve())
	}
	advance(100 * time.Millisecond)
	got = append(got, reserve()-0) // slot 4 is at 4/3 s from the start
	want := []time.Duration{0, 333_333_334, 666_666_667, time.Second, 1_333_333_334 - 100*time.Millisecond}
	for i := range want {
		// Within a nanosecond: the store rounds a start up to whole ns.
		if d := got[i] - want[i]; d < -1 || d > 1 {
			t.Errorf("booking %d waits %v, want %v", i, got[i], want[i])
		}
	}
	advance(10 * time.Second)
	if d := reserve(); d != 0 {
		t.Errorf("first booking after a pause waits %v, want 0", d)
	}

	// 90 concurrent bookings get 90 distinct slots, 1/rate apart.
	advance(time.Minute)
	var wg sync.WaitGroup
	waits := make([]time.Duration, 90)
	for i := range waits {
		wg.Go(func() { waits[i] = reserve() })
	}
	wg.Wait()
	slices.Sort(waits)
	for i, w := range waits {
		if slot := time.Duration(i) * time.Second / 3; w < slot-1 || w > slot+1 {
			t.Fatalf("sorted booking %d waits %v, want %v", i, w, slot)
		}
	}
	if _, err := pace.NewPacer(nil, "email", bucket.Rate{Count: 1, Per: time.Second}); err == nil {
		t.Error("NewPacer accepted a nil store")
	}
	if _, err := pace.NewPacer(store, "email", bucket.Rate{}); err == nil {
		t.Error("NewPacer accepted a zero rate")
	}
}

// publishBacklog stores jobs in the backlog with the given not-before.
func publishBacklog(t *testing.T, ctx context.Context, b *queuetest.Queue, key string, n int, notBefore time.Time) []*queue.Job {
	t.Helper()
	var jobs []*queue.Job
	for range n {
		j := queuetest.NewJob(t, b.Config.Name, key)
		j.NotBefore = notBefore
		if _, err := b.Pub.Publish(ctx, queue.Backlog, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// A backlog job never starts before its not-before, and a key whose jobs
// are not due never holds back another key's due jobs, even when they
// were queued first.
func TestBacklogNotBeforeWithoutHeadOfLineBlocking(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("nb"))
	rec := newRecorder()
	began := time.Now()
	notYet := began.Add(1500 * time.Millisecond)
	late := publishBacklog(t, ctx, b, "late", 3, notYet)
	due := publishBacklog(t, ctx, b, "due", 3, time.Time{})
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "6 successes", func() bool { return rec.count(worker.Succeeded) == 6 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, j := range due {
		if at := rec.starts[j.ID][0]; !at.Before(notYet) {
			t.Errorf("due job started %v after the test began: held behind the other key's job due at 1.5s", at.Sub(began))
		}
	}
	for _, j := range late {
		if at := rec.starts[j.ID][0]; at.Before(j.NotBefore) {
			t.Errorf("job started %v before its not-before", j.NotBefore.Sub(at))
		}
	}
	wantOrder := ids(append(due, late...))
	if !slices.Equal(rec.order, wantOrder) {
		t.Errorf("start order %v, want %v", rec.order, wantOrder)
	}
}

func ids(jobs []*queue.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// Three workers share a queue and one pacer: each key's jobs start in
// their backlog order whichever worker holds them.
func TestBacklogKeyOrderAcrossWorkers(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("fifo")
	cfg.LeakRate = bucket.Rate{Count: 100, Per: time.Second}
	ctx, b := queuetest.StartQueue(t, cfg)
	var keys []string
	var published []*queue.Job
	for k := range 5 {
		keys = append(keys, "key-"+strconv.Itoa(k))
	}
	for range 12 {
		for _, k := range keys {
			published = append(published, publishBacklog(t, ctx, b, k, 1, time.Time{})...)
		}
	}
	store, err := bucket.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	pacer, err := pace.NewPacer(store, "fifo", cfg.LeakRate)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	for range 3 { // each on a connection of its own
		queuetest.RunWorker(t, b.Server.JetStream(t), worker.WorkerConfig{Queue: cfg, Pacer: pacer, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			return nil
		})
	}
	rec.waitFor(t, 30*time.Second, "60 releases and successes", func() bool {
		return rec.count(worker.Released) == len(published) && rec.count(worker.Succeeded) == len(published)
	})

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, k := range keys {
		var want, got []string
		for _, j := range published {
			if j.Key == k {
				want = append(want, j.ID)
			}
		}
		for _, id := range rec.order {
			if slices.Contains(want, id) {
				got = append(got, id)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("key %s's jobs started in the order %v, want their backlog order %v", k, got, want)
		}
	}
}

// A job that waited longer than the queue's MaxAge goes to DEAD, taking
// no start; a fresh one still runs.
func TestBacklogMaxAgeDeadLetters(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("aged")
	cfg.MaxAge = time.Minute
	ctx, b := queuetest.StartQueue(t, cfg)
	old := queuetest.NewJob(t, "aged", "a")
	old.EnqueuedAt = time.Now().Add(-2 * time.Minute)
	if _, err := b.Pub.Publish(ctx, queue.Backlog, old); err != nil {
		t.Fatal(err)
	}
	fresh := publishBacklog(t, ctx, b, "a", 1, time.Time{})[0]
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "1 success and 1 dead letter", func() bool {
		return rec.count(worker.Succeeded) == 1 && rec.count(worker.DeadLettered) == 1
	})
	if _, ran := rec.starts[old.ID]; ran {
		t.Error("the expired job ran")
	}
	if _, ran := rec.starts[fresh.ID]; !ran {
		t.Error("the fresh job did not run")
	}
	dead := deadLetters(t, ctx, b.JS, "aged")
	if len(dead) != 1 || dead[0].Header.Get(spillway.HeaderJobID) != old.ID || string(dead[0].Data) != string(old.Payload) ||
		!strings.HasPrefix(dead[0].Header.Get(queue.HeaderDeadReason), "expired in backlog (waited 2m0") {
		t.Fatalf("dead letters %+v", dead)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("aged", queue.Backlog)); n != 0 {
		t.Errorf("backlog holds %d jobs", n)
	}
}

// A stopping worker lets the drain's lead go at once: another worker
// starts the backlog's jobs at their not-before, not after the lease or
// the ack wait runs out.
func TestBacklogHandBackOnStop(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("handback"))
	notBefore := time.Now().Add(2 * time.Second)
	jobs := publishBacklog(t, ctx, b, "k", 3, notBefore)
	first := newRecorder()
	stop := queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: first.observe}, func(ctx context.Context, j *queue.Job) error {
		first.started(j)
		return nil
	})
	first.waitFor(t, 10*time.Second, "the first worker to lead the drain", func() bool {
		return drainLeader(ctx, b.JS, "handback") != ""
	})
	stop()
	second := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: second.observe}, func(ctx context.Context, j *queue.Job) error {
		second.started(j)
		return nil
	})
	second.waitFor(t, 10*time.Second, "3 successes on the second worker", func() bool { return second.count(worker.Succeeded) == 3 })
	if len(first.order) != 0 {
		t.Errorf("the stopped worker ran %v", first.order)
	}
	for _, j := range jobs {
		at := second.starts[j.ID][0]
		if at.Before(notBefore) || at.After(notBefore.Add(5*time.Second)) {
			t.Errorf("job started %v after its not-before, want at once (before the 30s ack wait)", at.Sub(notBefore))
		}
	}
}

// drainLeader is the id in the drain's lease of queue, "" if none.
func drainLeader(ctx context.Context, js jetstream.JetStream, q string) string {
	kv, err := js.KeyValue(ctx, pace.PacerBucket)
	if err != nil {
		return ""
	}
	e, err := kv.Get(ctx, q+".drain-leader")
	if err != nil {
		return ""
	}
	return string(e.Value())
}

// Inspect reports depth, capacity, fill, oldest age and drain time.
func TestInspect(t *testing.T) {
	t.Parallel()
	cfg := queue.Config{Name: "look", Capacity: 40, PerKeyCapacity: 10, Memory: true, LeakRate: bucket.Rate{Count: 2, Per: time.Second}}
	ctx, b := queuetest.StartQueue(t, cfg)
	before := time.Now()
	publishBacklog(t, ctx, b, "a", 10, time.Time{})
	if _, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "look", "a")); err != nil {
		t.Fatal(err)
	}
	info, err := admin.Inspect(ctx, b.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	age := time.Since(before)
	if info.Queue != "look" || info.Backlog != 10 || info.Ready != 1 || info.Dead != 0 || info.Capacity != 40 || info.PerKeyCapacity != 10 ||
		info.Fill != 0.25 || info.EstimatedDrain != 5*time.Second || info.OldestAge <= 0 || info.OldestAge > age || info.LeakRate != cfg.LeakRate {
		t.Errorf("Inspect = %+v", info)
	}
	if info.InFlight != 0 || info.MaxAckPending != 0 || info.BacklogHeld != 0 {
		t.Errorf("no worker ran, yet consumer figures are %+v", info)
	}
	if _, err := admin.Inspect(ctx, b.JS, queue.Config{Name: "missing"}); err == nil {
		t.Error("Inspect of a queue without streams did not fail")
	}
}

// A grant taken by a worker that then vanished — here the test itself
// takes it and never settles it — is not lost: after the ack wait another
// worker books it a new start and runs it, and the key's later jobs and
// other keys' jobs do not wait for it meanwhile.
func TestBacklogGrantOfVanishedWorkerRunsAgain(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("head"))
	// A worker makes the grants consumer; stopped, it leaves it behind.
	rec := newRecorder()
	stop := queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, AckWait: time.Second, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error { return nil })
	var cons jetstream.Consumer
	rec.waitFor(t, 10*time.Second, "the grants consumer", func() bool {
		var err error
		cons, err = b.JS.Consumer(ctx, queue.GrantsStreamName("head"), worker.GrantsConsumer)
		return err == nil
	})
	stop()
	a := publishBacklog(t, ctx, b, "a", 3, time.Time{})
	other := publishBacklog(t, ctx, b, "b", 3, time.Time{})

	// The next worker leads; the test takes the first grant as a worker
	// that dies at once would.
	rec = newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, AckWait: time.Second, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	taken := <-batch.Messages()
	if taken == nil {
		t.Fatal("no grant came")
	}
	rec.waitFor(t, 15*time.Second, "every job, the vanished worker's one after the ack wait", func() bool { return rec.count(worker.Succeeded) == 6 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var lost string
	for _, j := range append(a, other...) {
		if len(rec.starts[j.ID]) != 1 {
			t.Errorf("job %s started %d times, want once", j.ID, len(rec.starts[j.ID]))
		}
		if rec.starts[j.ID][0].Sub(rec.starts[rec.order[0]][0]) > 500*time.Millisecond {
			lost = j.ID
		}
	}
	if lost == "" || lost != rec.order[5] {
		t.Errorf("the vanished worker's job should start last, after the ack wait: order %v, late %q", rec.order, lost)
	}
}

// Jobs of one key that reached the stream out of not-before order (two
// submissions of one client racing) start at their own times: a job that
// is not due yet does not hold back a due one of its key behind it, and
// among the key's due jobs the stream order still holds. Checked with two
// workers, so the job ahead may be held elsewhere.
func TestBacklogKeyDueJobPassesOneNotYetDue(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("inv")
	cfg.LeakRate = bucket.Rate{Count: 100, Per: time.Second}
	ctx, b := queuetest.StartQueue(t, cfg)
	rec := newRecorder()
	began := time.Now()
	later := publishBacklog(t, ctx, b, "k", 1, began.Add(2*time.Second))         // stored first, due at 2s
	sooner := publishBacklog(t, ctx, b, "k", 1, began.Add(300*time.Millisecond)) // stored second, due at 0.3s
	due := publishBacklog(t, ctx, b, "k", 2, time.Time{})                        // due at once, behind both
	for range 2 {
		queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			return nil
		})
	}
	rec.waitFor(t, 20*time.Second, "4 successes", func() bool { return rec.count(worker.Succeeded) == 4 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	all := append(append(append([]*queue.Job{}, later...), sooner...), due...)
	for _, j := range all {
		if at := rec.starts[j.ID][0]; at.Before(j.NotBefore) {
			t.Errorf("job started %v before its not-before", j.NotBefore.Sub(at))
		}
	}
	if at := rec.starts[sooner[0].ID][0]; !at.Before(later[0].NotBefore) {
		t.Errorf("the job due at 0.3s started at %v, held behind the key's job due at 2s", at.Sub(began))
	}
	// The two due at once go first, in their order, passing the two not
	// yet due ahead of them; then the job due at 0.3s; the one due at 2s
	// is last.
	if want := ids([]*queue.Job{due[0], due[1], sooner[0], later[0]}); !slices.Equal(rec.order, want) {
		t.Errorf("start order %v, want %v", rec.order, want)
	}
}

// A key's due job behind more than a window of its jobs not due yet (a
// client that scheduled many jobs an hour ahead, then sent one for now; or
// a burst whose publishes raced) starts at once: the leader reads past the
// ones that wait. The scheduled ones do not start early.
func TestBacklogDueJobBehindManyNotDue(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("deep")
	cfg.LeakRate = bucket.Rate{Count: 100, Per: time.Second}
	ctx, b := queuetest.StartQueue(t, cfg)
	rec := newRecorder()
	began := time.Now()
	waiting := publishBacklog(t, ctx, b, "k", 40, began.Add(time.Hour))
	due := publishBacklog(t, ctx, b, "k", 1, time.Time{})
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "the due job to start", func() bool { return rec.count(worker.Succeeded) >= 1 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.starts[due[0].ID]) != 1 {
		t.Fatalf("started %v, want the due job %s once", rec.order, due[0].ID)
	}
	for _, j := range waiting {
		if n := len(rec.starts[j.ID]); n != 0 {
			t.Errorf("job %s due in an hour started %d times", j.ID, n)
		}
	}
	t.Logf("the due job behind %d jobs not due started %v after the worker began", len(waiting), rec.starts[due[0].ID][0].Sub(began).Round(time.Millisecond))
}

// Backlog jobs start at the leak rate, not merely reach READY at it: with
// every handler of the worker busy (a slow handler, concurrency 2, admitted
// jobs in READY competing for the slots), released jobs must not wait
// somewhere and then start together. No sliding 1 s window holds more than
// rate+1 handler starts of backlog jobs: the pacer books starts exactly
// 1/rate apart, so any 1 s window holds at most rate booked starts, and a
// measured start is its booked time plus a scheduling delay shorter than
// 1/rate, which can bring one more start into a window at its edge —
// never two, and the same one more for a window of any length. The drain
// still progresses: every backlog job starts, and every admitted job.
func TestBacklogStartsNeverBurstAboveLeakRate(t *testing.T) {
	t.Parallel()
	const rate, backlogJobs, readyJobs = 10, 40, 40
	cfg := queuetest.QueueConfig("burst")
	cfg.LeakRate = bucket.Rate{Count: rate, Per: time.Second}
	ctx, b := queuetest.StartQueue(t, cfg)
	var backlog, ready []*queue.Job
	for i := range backlogJobs {
		backlog = append(backlog, publishBacklog(t, ctx, b, "b"+strconv.Itoa(i%8), 1, time.Time{})...)
	}
	for i := range readyJobs {
		ready = append(ready, queuetest.NewJob(t, "burst", "r"+strconv.Itoa(i%4)))
	}
	if ok, _, _, other := b.PublishAll(ctx, queue.Ready, ready); ok != readyJobs {
		t.Fatalf("published %d of %d admitted jobs: %v", ok, readyJobs, other)
	}
	rec := newRecorder()
	var running, peak atomic.Int64
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 2, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		rec.started(j)
		time.Sleep(100 * time.Millisecond) // slow: 2 handlers run at most 20 jobs/s
		return nil
	})
	rec.waitFor(t, 60*time.Second, "every job to succeed", func() bool { return rec.count(worker.Succeeded) == backlogJobs+readyJobs })
	if p := peak.Load(); p > 2 {
		t.Errorf("%d handlers ran at once, admitted and backlog jobs together; want at most the concurrency, 2", p)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var starts []time.Time
	for _, j := range backlog {
		ss := rec.starts[j.ID]
		if len(ss) != 1 {
			t.Fatalf("backlog job %s started %d times, want once", j.ID, len(ss))
		}
		starts = append(starts, ss[0])
	}
	for _, j := range ready {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("admitted job %s started %d times, want once", j.ID, n)
		}
	}
	slices.SortFunc(starts, time.Time.Compare)
	// The edge's +1 does not add up: a window of k seconds holds at most
	// k×rate+1 starts, for every k.
	for k := 1; k <= 3; k++ {
		window := time.Duration(k) * time.Second
		most, at := 0, 0
		for i := range starts {
			n, _ := slices.BinarySearchFunc(starts[i:], starts[i].Add(window), time.Time.Compare) // starts in [starts[i], +window)
			if n > most {
				most, at = n, i
			}
		}
		span := starts[len(starts)-1].Sub(starts[0])
		t.Logf("figure: %d backlog starts over %v (%.2f/s overall); at most %d in a %v window (from start %d); leak rate %d/s",
			len(starts), span.Round(time.Millisecond), float64(len(starts)-1)/span.Seconds(), most, window, at, rate)
		if most > k*rate+1 {
			t.Errorf("%d backlog jobs started within %v (from %v after the first), above the leak rate of %d/s (+1 for a window's edge)",
				most, window, starts[at].Sub(starts[0]).Round(time.Millisecond), rate)
		}
	}
}

// A backlog job runs from its backlog message, and its failures are settled
// as a READY job's are: a failed try that may be retried moves it to READY
// with its tries so far and the retry's not-before — the next try is
// attempt 2, no sooner than the delay; the last failure dead-letters it
// (from READY, where its retries ran); a permanent failure on the first try
// dead-letters it from the backlog, payload and headers intact. The events
// say where each try ran. Nothing is left in the backlog or READY.
func TestBacklogJobFailuresRetryThroughReady(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("bfail"))
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	flaky := publishBacklog(t, ctx, b, "flaky", 1, time.Time{})[0]
	bad := publishBacklog(t, ctx, b, "bad", 1, time.Time{})[0]
	perm := queuetest.NewJob(t, "bfail", "perm")
	perm.Header = map[string][]string{"Traceparent": {traceparent}}
	if _, err := b.Pub.Publish(ctx, queue.Backlog, perm); err != nil {
		t.Fatal(err)
	}
	policy := retry.Policy{MaxAttempts: 3, Initial: 300 * time.Millisecond, Max: 300 * time.Millisecond, Jitter: 0.5}
	delay := policy.Delay(1) * 3 / 4 // fixedRand takes off half the 50% jitter
	rec := newRecorder()
	var mu sync.Mutex
	attempts := map[string][]int{}
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Retry: policy, Rand: fixedRand{}, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		mu.Lock()
		attempts[j.ID] = append(attempts[j.ID], j.Attempt)
		mu.Unlock()
		if string(j.Payload) != "payload of "+j.ID {
			return retry.Permanent(errors.New("payload lost: " + string(j.Payload)))
		}
		switch {
		case j.Key == "perm":
			return retry.Permanent(errors.New("malformed address"))
		case j.Key == "bad", j.Attempt == 1:
			return errors.New("downstream said no")
		}
		return nil
	})
	rec.waitFor(t, 20*time.Second, "1 success and 2 dead letters", func() bool {
		return rec.count(worker.Succeeded) == 1 && rec.count(worker.DeadLettered) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string][]int{flaky.ID: {1, 2}, bad.ID: {1, 2, 3}, perm.ID: {1}} {
		if got := attempts[id]; !slices.Equal(got, want) {
			t.Errorf("job %s ran as attempts %v, want %v", id, got, want)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if tries := rec.starts[flaky.ID]; len(tries) == 2 && tries[1].Sub(tries[0]) < delay {
		t.Errorf("the retry came %v after the first try, want no sooner than the delay %v", tries[1].Sub(tries[0]), delay)
	}
	backlog, ready := queue.StreamName("bfail", queue.Backlog), queue.StreamName("bfail", queue.Ready)
	type step struct {
		kind    worker.EventKind
		attempt int
		stream  string
	}
	steps := map[string][]step{}
	for _, e := range rec.events {
		steps[e.Job.ID] = append(steps[e.Job.ID], step{e.Kind, e.Attempt, e.Stream})
	}
	for id, want := range map[string][]step{
		flaky.ID: {{worker.Released, 1, backlog}, {worker.Started, 1, backlog}, {worker.Retrying, 1, backlog}, {worker.Started, 2, ready}, {worker.Succeeded, 2, ready}},
		perm.ID:  {{worker.Released, 1, backlog}, {worker.Started, 1, backlog}, {worker.DeadLettered, 1, backlog}},
	} {
		if got := steps[id]; !slices.Equal(got, want) {
			t.Errorf("job %s's events %v, want %v", id, got, want)
		}
	}
	reasons := map[string][]string{}
	for _, d := range deadLetters(t, ctx, b.JS, "bfail") {
		reasons[d.Header.Get(spillway.HeaderJobID)] = []string{d.Header.Get(queue.HeaderDeadReason), d.Header.Get(spillway.HeaderAttempt), d.Header.Get(queue.HeaderSourceStream), d.Header.Get("Traceparent"), string(d.Data)}
	}
	if want := []string{"attempts exhausted (3 of 3)", "3", ready, "", "payload of " + bad.ID}; !slices.Equal(reasons[bad.ID], want) {
		t.Errorf("dead letter of the always failing job %q, want %q", reasons[bad.ID], want)
	}
	if want := []string{"permanent error", "1", backlog, traceparent, "payload of " + perm.ID}; !slices.Equal(reasons[perm.ID], want) {
		t.Errorf("dead letter of the permanently failing job %q, want %q", reasons[perm.ID], want)
	}
	for _, s := range []string{backlog, ready} {
		if n := queuetest.Stored(t, ctx, b.JS, s); n != 0 {
			t.Errorf("%s holds %d jobs after all were settled", s, n)
		}
	}
}

// Stopping a worker lets a backlog job's running handler finish within the
// grace period and acks it; one still running when the grace period ends
// is handed back to the backlog — not lost, not moved — and another worker
// starts it again from there.
func TestBacklogJobRunningAtStop(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("bstop"))
	quick := publishBacklog(t, ctx, b, "quick", 1, time.Time{})[0]
	stuck := publishBacklog(t, ctx, b, "stuck", 1, time.Time{})[0]
	rec := newRecorder()
	release := make(chan struct{})
	stop := queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, GracePeriod: 700 * time.Millisecond, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		if j.Key == "quick" {
			<-release
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		<-ctx.Done() // outlives the grace period
		return ctx.Err()
	})
	rec.waitFor(t, 10*time.Second, "both running", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.order) == 2 })
	close(release)
	stop()
	if rec.count(worker.Succeeded) != 1 || rec.count(worker.HandedBack) != 1 {
		t.Fatalf("after stop: %d succeeded, %d handed back; want 1 and 1", rec.count(worker.Succeeded), rec.count(worker.HandedBack))
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("bstop", queue.Backlog)); n != 1 {
		t.Fatalf("the backlog holds %d jobs after the stop, want the handed-back one", n)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("bstop", queue.Ready)); n != 0 {
		t.Fatalf("READY holds %d jobs after the stop, want none", n)
	}
	second := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: second.observe}, func(ctx context.Context, j *queue.Job) error {
		second.started(j)
		return nil
	})
	second.waitFor(t, 10*time.Second, "the handed-back job", func() bool { return second.count(worker.Succeeded) == 1 })
	if got := second.order; !slices.Equal(got, []string{stuck.ID}) {
		t.Errorf("second worker ran %v, want the stuck job %s (and not the finished %s)", got, stuck.ID, quick.ID)
	}
}

// A worker whose every handler stays busy takes no grants, so the due
// backlog jobs do not wait for it while another worker has handlers free:
// the grants wait in the stream, and the other worker starts them.
func TestBacklogBusyWorkerHandsDueJobsOn(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("busy"))
	busy, free := newRecorder(), newRecorder()
	unblock := make(chan struct{})
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 1, FetchWait: 100 * time.Millisecond, Observe: busy.observe}, func(ctx context.Context, j *queue.Job) error {
		busy.started(j)
		if j.Key == "long" {
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		return nil
	})
	t.Cleanup(func() { close(unblock) }) // before the worker stops (cleanups run last first)
	if _, err := b.Pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "busy", "long")); err != nil {
		t.Fatal(err)
	}
	busy.waitFor(t, 10*time.Second, "the long job to run", func() bool { return busy.count(worker.Started) == 1 })
	queued := publishBacklog(t, ctx, b, "q", 2, time.Time{})
	busy.waitFor(t, 10*time.Second, "a grant waiting for a free handler", func() bool {
		c, err := b.JS.Consumer(ctx, queue.GrantsStreamName("busy"), worker.GrantsConsumer)
		return err == nil && c.CachedInfo().NumPending > 0
	})
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: free.observe}, func(ctx context.Context, j *queue.Job) error {
		free.started(j)
		return nil
	})
	free.waitFor(t, 15*time.Second, "the free worker to run the backlog jobs", func() bool { return free.count(worker.Succeeded) == 2 })
	free.mu.Lock()
	defer free.mu.Unlock()
	if got, want := free.order, ids(queued); !slices.Equal(got, want) {
		t.Errorf("the free worker ran %v, want %v", got, want)
	}
	busy.mu.Lock()
	defer busy.mu.Unlock()
	if len(busy.order) != 1 {
		t.Errorf("the busy worker ran %v, want only its long job", busy.order)
	}
}

// A replica that lags behind the backlog's leader may answer a direct get
// "no such message" for a job that is there. Neither the leader nor a
// worker acts on that word alone: with every direct get of the backlog
// answered so, every job still runs, once, and leaves the backlog.
func TestBacklogLaggingReplicaLosesNoJob(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("lag"))
	jobs := append(publishBacklog(t, ctx, b, "a", 3, time.Time{}), publishBacklog(t, ctx, b, "b", 3, time.Time{})...)
	lagging, lied := b.Server.LaggingDirect(t, queue.StreamName("lag", queue.Backlog))
	rec := newRecorder()
	queuetest.RunWorker(t, lagging, worker.WorkerConfig{Queue: b.Config, AckWait: time.Second, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 30*time.Second, "every job", func() bool { return rec.count(worker.Succeeded) == len(jobs) })
	rec.mu.Lock()
	for _, j := range jobs {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("job %s started %d times, want once", j.ID, n)
		}
	}
	rec.mu.Unlock()
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("lag", queue.Backlog)); n != 0 {
		t.Errorf("the backlog holds %d jobs, want none", n)
	}
	if lied.Load() < int64(len(jobs)) {
		t.Errorf("%d direct gets of the backlog, want at least one a job: the reads did not go direct", lied.Load())
	}
}
