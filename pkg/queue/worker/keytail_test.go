package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A key at its max with more jobs in READY than its worker may hold
// waiting does not hold back the jobs behind them: 40 jobs of key a (max
// 1, 100 ms each) then 4 of key b in READY, one worker of concurrency 4.
// b's jobs start while most of a's have not run yet (a's jobs go to
// READY's tail), every job runs exactly once, on its first try (a move
// is not a try), none is dead-lettered, no more than 4 wait in the worker
// at once, and READY is empty at the end.
func TestKeyAtMaxDoesNotHoldBackOtherKeys(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("conctail"))
	bound := func(key string, most int) []queue.ConcurrencyKey {
		return []queue.ConcurrencyKey{{Name: "per-key", Max: most, Token: queue.KeyToken(key)}}
	}
	var jobs []*queue.Job
	for i := range 44 {
		key, most := "a", 1
		if i >= 40 {
			key, most = "b", 4
		}
		j := queuetest.NewJob(t, "conctail", key)
		j.Concurrency = bound(key, most)
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}

	rec := newRecorder()
	kc := &keyCounter{running: map[string]int{}, peak: map[string]int{}}
	var (
		mu    sync.Mutex
		aDone int // a's jobs finished
		bRun  int // b's jobs started
		aWhen = -1
	)
	h := func(ctx context.Context, j *queue.Job) error {
		kc.enter(j.Key)
		defer kc.leave(j.Key)
		if j.Attempt != 1 {
			t.Errorf("job %s of key %s: try %d, want 1", j.ID, j.Key, j.Attempt)
		}
		if j.Key == "b" {
			mu.Lock()
			if bRun++; bRun == 4 {
				aWhen = aDone
			}
			mu.Unlock()
		}
		rec.started(j)
		time.Sleep(100 * time.Millisecond)
		if j.Key == "a" {
			mu.Lock()
			aDone++
			mu.Unlock()
		}
		return nil
	}
	var waiting, mostWaiting int // READY jobs waiting in the worker for key a: at most its concurrency
	observe := func(e worker.Event) {
		mu.Lock()
		switch e.Kind {
		case worker.KeyWaiting:
			waiting++
			mostWaiting = max(mostWaiting, waiting)
		case worker.KeyWaited:
			waiting--
		}
		mu.Unlock()
		rec.observe(e)
	}
	began := time.Now()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Observe: observe, AckWait: 3 * time.Second}, h)

	rec.waitFor(t, 30*time.Second, "b's 4 jobs started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bRun == 4
	})
	t.Logf("b's 4 jobs started %v after the worker, %d of a's 40 done by then", time.Since(began).Round(time.Millisecond), aWhen)
	if aWhen >= 20 {
		t.Errorf("b's jobs started only after %d of a's 40 jobs had run: a's jobs held them back", aWhen)
	}
	rec.waitFor(t, 60*time.Second, "44 successes", func() bool { return rec.count(worker.Succeeded) == 44 })
	t.Logf("all 44 jobs done %v after the worker, after %d moves to READY's tail", time.Since(began).Round(time.Millisecond), rec.count(worker.KeyMoved))
	for _, j := range jobs {
		if n := rec.startCount(j.ID); n != 1 {
			t.Errorf("job %s of key %s ran %d times, want once", j.ID, j.Key, n)
		}
	}
	if n := rec.count(worker.DeadLettered); n != 0 {
		t.Errorf("%d jobs dead-lettered", n)
	}
	if rec.count(worker.KeyMoved) == 0 {
		t.Errorf("no job moved to READY's tail: the test did not reach the bound")
	}
	mu.Lock()
	if mostWaiting > 4 {
		t.Errorf("%d jobs waited in the worker at once, want at most its concurrency, 4", mostWaiting)
	}
	mu.Unlock()
	kc.mu.Lock()
	if kc.peak["a"] > 1 {
		t.Errorf("%d of a's jobs ran at once, max 1", kc.peak["a"])
	}
	kc.mu.Unlock()
	rec.waitFor(t, 10*time.Second, "READY empty", func() bool {
		return queuetest.Stored(t, ctx, b.JS, queue.StreamName("conctail", queue.Ready)) == 0
	})
}

// A worker that dies between a job's copy to READY's tail and the ack of
// the delivery it copied leaves the job twice in READY. While the copy is
// there (its key is still at its max), the delivery, when it comes back,
// is dropped unrun: the job runs once, from the copy, on its first try.
func TestKeyTailMoveCrashBeforeAck(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("conccrash"))
	const ackWait = time.Second
	keys := []queue.ConcurrencyKey{{Name: "per-key", Max: 1, Token: queue.KeyToken("a")}}
	stream := queue.StreamName("conccrash", queue.Ready)

	// Key a at its max: a holder that is not a job of READY, renewed
	// until the test lets it go.
	kv, err := keyslots.OpenBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	holder, ok, err := keyslots.New(kv, "conccrash", ackWait).TryAcquire(ctx, "holder", keys)
	if !ok || err != nil {
		t.Fatalf("taking key a's one slot: %v, %v", ok, err)
	}
	letGo := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(ackWait / 5)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				_ = holder.Renew(ctx)
			case <-letGo:
				_ = holder.Release(ctx)
				return
			}
		}
	}()

	j := queuetest.NewJob(t, "conccrash", "a")
	j.Concurrency = keys
	if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	// The dead worker: it took the delivery, copied it to the tail and
	// died before its ack.
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: worker.ReadyConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		MaxDeliver: -1, MaxAckPending: 1000, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg == nil {
		t.Fatalf("the job was not delivered: %v", batch.Error())
	}
	meta, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	src := queue.Source{Queue: "conccrash", Subject: msg.Subject(), Stream: meta.Stream, Seq: meta.Sequence.Stream, Header: msg.Headers(), Data: msg.Data()}
	died := func(context.Context) error { return nil }
	if _, err := queue.TailMove(src, 0, time.Now(), 1).Do(ctx, b.JS, died); err != nil {
		t.Fatal(err)
	}
	if n := queuetest.Stored(t, ctx, b.JS, stream); n != 2 {
		t.Fatalf("READY holds %d messages after the copy, want 2 (the delivery and its copy)", n)
	}

	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 4, Observe: rec.observe, AckWait: ackWait}, func(ctx context.Context, got *queue.Job) error {
		rec.started(got)
		if got.Attempt != 1 {
			t.Errorf("job %s: try %d, want 1", got.ID, got.Attempt)
		}
		return nil
	})
	// The copy waits for key a; the delivery comes back after the ack
	// wait and is dropped: one message left, the copy.
	rec.waitFor(t, 20*time.Second, "the copied delivery dropped", func() bool {
		return queuetest.Stored(t, ctx, b.JS, stream) == 1
	})
	if n := rec.startCount(j.ID); n != 0 {
		t.Fatalf("the job ran %d times while its key was at its max", n)
	}
	close(letGo)
	<-renewed
	rec.waitFor(t, 20*time.Second, "the job's success", func() bool { return rec.count(worker.Succeeded) == 1 })
	rec.waitFor(t, 10*time.Second, "READY empty", func() bool { return queuetest.Stored(t, ctx, b.JS, stream) == 0 })
	if n := rec.startCount(j.ID); n != 1 {
		t.Errorf("the job ran %d times, want once", n)
	}
	if n := rec.count(worker.DeadLettered); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// A job whose move to READY's tail READY refuses (full) is not lost and
// spends no try: it waits in its worker, beyond the bound, and the worker
// pulls nothing more until a waiter is done. READY holds 6 jobs at most,
// all of key a (max 1); a worker of concurrency 2 may hold 2 waiting, so
// the fourth job it pulls is moved — and READY refuses it.
func TestKeyTailMoveReadyFull(t *testing.T) {
	t.Parallel()
	cfg := queuetest.QueueConfig("conctailfull")
	cfg.ReadyCapacity = 6
	ctx, b := queuetest.StartQueue(t, cfg)
	keys := []queue.ConcurrencyKey{{Name: "per-key", Max: 1, Token: queue.KeyToken("a")}}
	var jobs []*queue.Job
	for range 6 {
		j := queuetest.NewJob(t, "conctailfull", "a")
		j.Concurrency = keys
		if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	rec := newRecorder()
	kc := &keyCounter{running: map[string]int{}, peak: map[string]int{}}
	logs := &lockedBuffer{}
	release := make(chan struct{})
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Concurrency: 2, Observe: rec.observe, AckWait: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, func(ctx context.Context, j *queue.Job) error {
		kc.enter(j.Key)
		defer kc.leave(j.Key)
		rec.started(j)
		if j.Attempt != 1 {
			t.Errorf("job %s: try %d, want 1", j.ID, j.Attempt)
		}
		<-release // the first holds key a's slot, READY full, until a move was refused
		return nil
	})
	rec.waitFor(t, 30*time.Second, "a move to READY's tail refused", func() bool {
		return strings.Contains(logs.String(), "tail failed; it waits in this worker")
	})
	close(release)
	rec.waitFor(t, 30*time.Second, "6 successes", func() bool { return rec.count(worker.Succeeded) == 6 })
	for _, j := range jobs {
		if n := rec.startCount(j.ID); n != 1 {
			t.Errorf("job %s ran %d times, want once", j.ID, n)
		}
	}
	if n := rec.count(worker.DeadLettered); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	kc.mu.Lock()
	if kc.peak["a"] > 1 {
		t.Errorf("%d of a's jobs ran at once, max 1", kc.peak["a"])
	}
	kc.mu.Unlock()
	rec.waitFor(t, 10*time.Second, "READY empty", func() bool {
		return queuetest.Stored(t, ctx, b.JS, queue.StreamName("conctailfull", queue.Ready)) == 0
	})
}

// lockedBuffer is a log's output, written and read from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
