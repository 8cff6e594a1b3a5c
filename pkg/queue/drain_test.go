package queue_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
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
	p, err := queue.NewPacer(store, "email", bucket.Rate{Count: 3, Per: time.Second}) // 333,333,333.3 ns apart
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
	if _, err := queue.NewPacer(nil, "email", bucket.Rate{Count: 1, Per: time.Second}); err == nil {
		t.Error("NewPacer accepted a nil store")
	}
	if _, err := queue.NewPacer(store, "email", bucket.Rate{}); err == nil {
		t.Error("NewPacer accepted a zero rate")
	}
}

// publishBacklog stores jobs in the backlog with the given not-before.
func publishBacklog(t *testing.T, ctx context.Context, b *bundle, key string, n int, notBefore time.Time) []*queue.Job {
	t.Helper()
	var jobs []*queue.Job
	for range n {
		j := newJob(t, b.cfg.Name, key)
		j.NotBefore = notBefore
		if _, err := b.pub.Publish(ctx, queue.Backlog, j); err != nil {
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
	ctx, b := setup(t, testQueue("nb"))
	rec := newRecorder()
	began := time.Now()
	notYet := began.Add(1500 * time.Millisecond)
	late := publishBacklog(t, ctx, b, "late", 3, notYet)
	due := publishBacklog(t, ctx, b, "due", 3, time.Time{})
	runWorker(t, b.js, queue.WorkerConfig{Queue: b.cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "6 successes", func() bool { return rec.count(queue.Succeeded) == 6 })
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

// Three workers share a queue and one pacer: each key's jobs move to READY
// in their backlog order whichever worker holds them, and the starts are
// spaced by the leak rate.
func TestBacklogKeyOrderAcrossWorkers(t *testing.T) {
	t.Parallel()
	cfg := testQueue("fifo")
	cfg.LeakRate = bucket.Rate{Count: 100, Per: time.Second}
	ctx, b := setup(t, cfg)
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
	pacer, err := queue.NewPacer(store, "fifo", cfg.LeakRate)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	for range 3 { // each on a connection of its own
		runWorker(t, b.srv.JetStream(t), queue.WorkerConfig{Queue: cfg, Pacer: pacer, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error { return nil })
	}
	rec.waitFor(t, 30*time.Second, "60 releases and successes", func() bool {
		return rec.count(queue.Released) == len(published) && rec.count(queue.Succeeded) == len(published)
	})

	rec.mu.Lock()
	defer rec.mu.Unlock()
	readySeq := map[string]uint64{}
	for _, e := range rec.events {
		if e.Kind == queue.Released {
			readySeq[e.Job.ID] = e.Sequence
		}
	}
	for _, k := range keys {
		var want []string
		for _, j := range published {
			if j.Key == k {
				want = append(want, j.ID)
			}
		}
		got := slices.Clone(want)
		slices.SortFunc(got, func(a, b string) int { return int(readySeq[a]) - int(readySeq[b]) })
		if !slices.Equal(got, want) {
			t.Errorf("key %s reached READY in the order %v, want its backlog order %v", k, got, want)
		}
	}
}

// A job that waited longer than the queue's MaxAge goes to DEAD, taking
// no start; a fresh one still runs.
func TestBacklogMaxAgeDeadLetters(t *testing.T) {
	t.Parallel()
	cfg := testQueue("aged")
	cfg.MaxAge = time.Minute
	ctx, b := setup(t, cfg)
	old := newJob(t, "aged", "a")
	old.EnqueuedAt = time.Now().Add(-2 * time.Minute)
	if _, err := b.pub.Publish(ctx, queue.Backlog, old); err != nil {
		t.Fatal(err)
	}
	fresh := publishBacklog(t, ctx, b, "a", 1, time.Time{})[0]
	rec := newRecorder()
	runWorker(t, b.js, queue.WorkerConfig{Queue: cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 20*time.Second, "1 success and 1 dead letter", func() bool {
		return rec.count(queue.Succeeded) == 1 && rec.count(queue.DeadLettered) == 1
	})
	if _, ran := rec.starts[old.ID]; ran {
		t.Error("the expired job ran")
	}
	if _, ran := rec.starts[fresh.ID]; !ran {
		t.Error("the fresh job did not run")
	}
	dead := deadLetters(t, ctx, b.js, "aged")
	if len(dead) != 1 || dead[0].Header.Get(queue.HeaderJobID) != old.ID || string(dead[0].Data) != string(old.Payload) ||
		!strings.HasPrefix(dead[0].Header.Get(queue.HeaderDeadReason), "expired in backlog (waited 2m0") {
		t.Fatalf("dead letters %+v", dead)
	}
	if n := stored(t, ctx, b.js, queue.StreamName("aged", queue.Backlog)); n != 0 {
		t.Errorf("backlog holds %d jobs", n)
	}
}

// A stopping worker hands its held backlog jobs back at once: another
// worker starts them at their not-before, not after the ack wait.
func TestBacklogHandBackOnStop(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, testQueue("handback"))
	notBefore := time.Now().Add(2 * time.Second)
	jobs := publishBacklog(t, ctx, b, "k", 3, notBefore)
	first := newRecorder()
	stop := runWorker(t, b.js, queue.WorkerConfig{Queue: b.cfg, Observe: first.observe}, func(ctx context.Context, j *queue.Job) error {
		first.started(j)
		return nil
	})
	first.waitFor(t, 10*time.Second, "the first worker to hold the backlog", func() bool {
		info, err := queue.Inspect(ctx, b.js, b.cfg)
		return err == nil && info.BacklogHeld == 3
	})
	stop()
	second := newRecorder()
	runWorker(t, b.js, queue.WorkerConfig{Queue: b.cfg, Observe: second.observe}, func(ctx context.Context, j *queue.Job) error {
		second.started(j)
		return nil
	})
	second.waitFor(t, 10*time.Second, "3 successes on the second worker", func() bool { return second.count(queue.Succeeded) == 3 })
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

// Inspect reports depth, capacity, fill, oldest age and drain time.
func TestInspect(t *testing.T) {
	t.Parallel()
	cfg := queue.Config{Name: "look", Capacity: 40, PerKeyCapacity: 10, Memory: true, LeakRate: bucket.Rate{Count: 2, Per: time.Second}}
	ctx, b := setup(t, cfg)
	before := time.Now()
	publishBacklog(t, ctx, b, "a", 10, time.Time{})
	if _, err := b.pub.Publish(ctx, queue.Ready, newJob(t, "look", "a")); err != nil {
		t.Fatal(err)
	}
	info, err := queue.Inspect(ctx, b.js, cfg)
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
	if _, err := queue.Inspect(ctx, b.js, queue.Config{Name: "missing"}); err == nil {
		t.Error("Inspect of a queue without streams did not fail")
	}
}

// A key's first job held by another consumer — here the test itself, as a
// stand-in for a slow worker — holds back that key's later jobs, however
// due they are, and nothing of other keys: per-key FIFO across processes.
func TestBacklogKeyWaitsForItsHeadHeldElsewhere(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, testQueue("head"))
	// A worker creates the shared backlog consumer; then the test takes
	// a's first job from it before the next worker runs.
	rec := newRecorder()
	stop := runWorker(t, b.js, queue.WorkerConfig{Queue: b.cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error { return nil })
	var cons jetstream.Consumer
	rec.waitFor(t, 10*time.Second, "the backlog consumer", func() bool {
		var err error
		cons, err = b.js.Consumer(ctx, queue.StreamName("head", queue.Backlog), queue.BacklogConsumer)
		return err == nil
	})
	stop() // leaves the consumers behind
	a := publishBacklog(t, ctx, b, "a", 3, time.Time{})
	other := publishBacklog(t, ctx, b, "b", 3, time.Time{})
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held := <-batch.Messages()
	if held == nil || held.Headers().Get(queue.HeaderJobID) != a[0].ID {
		t.Fatalf("fetched %v, want a's first job", held)
	}

	rec = newRecorder()
	runWorker(t, b.js, queue.WorkerConfig{Queue: b.cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	rec.waitFor(t, 10*time.Second, "b's jobs", func() bool { return rec.count(queue.Succeeded) == 3 })
	time.Sleep(300 * time.Millisecond) // a's later jobs are due: give them the chance to jump
	rec.mu.Lock()
	if got, want := rec.order, ids(other); !slices.Equal(got, want) {
		t.Errorf("while a's first job was held elsewhere, ran %v; want only b's %v", got, want)
	}
	rec.mu.Unlock()
	if err := held.Nak(); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 10*time.Second, "a's jobs", func() bool { return rec.count(queue.Succeeded) == 6 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got, want := rec.order[3:], ids(a); !slices.Equal(got, want) {
		t.Errorf("a's jobs ran in the order %v, want %v", got, want)
	}
}

// Jobs of one key that reached the stream out of not-before order (two
// submissions of one client racing) start at their own times: a job that
// is not due yet does not hold back a due one of its key behind it, and
// among the key's due jobs the stream order still holds. Checked with two
// workers, so the job ahead may be held elsewhere.
func TestBacklogKeyDueJobPassesOneNotYetDue(t *testing.T) {
	t.Parallel()
	cfg := testQueue("inv")
	cfg.LeakRate = bucket.Rate{Count: 100, Per: time.Second}
	ctx, b := setup(t, cfg)
	rec := newRecorder()
	began := time.Now()
	later := publishBacklog(t, ctx, b, "k", 1, began.Add(2*time.Second))         // stored first, due at 2s
	sooner := publishBacklog(t, ctx, b, "k", 1, began.Add(300*time.Millisecond)) // stored second, due at 0.3s
	due := publishBacklog(t, ctx, b, "k", 2, time.Time{})                        // due at once, behind both
	for range 2 {
		runWorker(t, b.js, queue.WorkerConfig{Queue: b.cfg, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
			rec.started(j)
			return nil
		})
	}
	rec.waitFor(t, 20*time.Second, "4 successes", func() bool { return rec.count(queue.Succeeded) == 4 })
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
