package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Publishing capacity + K jobs stores exactly capacity and refuses K with
// ErrQueueFull: JetStream enforces the bound, nothing is dropped silently.
func TestBacklogCapacityIsExact(t *testing.T) {
	t.Parallel()
	const capacity, extra = 200, 37
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email", Capacity: capacity})
	var jobs []*queue.Job
	for i := range capacity + extra {
		jobs = append(jobs, queuetest.NewJob(t, "email", fmt.Sprint("client-", i%17)))
	}
	ok, full, keyFull, other := b.PublishAll(ctx, queue.Backlog, jobs)
	if len(other) > 0 {
		t.Fatalf("unexpected errors: %v", other)
	}
	if ok != capacity || full != extra || keyFull != 0 {
		t.Fatalf("%d stored, %d queue full, %d key full; want %d, %d, 0", ok, full, keyFull, capacity, extra)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("email", queue.Backlog)); n != capacity {
		t.Fatalf("the stream holds %d jobs, want %d", n, capacity)
	}
	t.Logf("capacity %d + %d: %d stored, %d × ErrQueueFull, 0 silent drops", capacity, extra, ok, full)
}

// The per-key cap refuses one key's excess with ErrKeyQueueFull and leaves
// other keys alone.
func TestBacklogPerKeyCapacity(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email", Capacity: 100, PerKeyCapacity: 5})
	var noisy, quiet []*queue.Job
	for range 12 {
		noisy = append(noisy, queuetest.NewJob(t, "email", "noisy.neighbour.*"))
	}
	for range 5 {
		quiet = append(quiet, queuetest.NewJob(t, "email", "quiet"))
	}
	ok, full, keyFull, other := b.PublishAll(ctx, queue.Backlog, noisy)
	if len(other) > 0 || ok != 5 || keyFull != 7 || full != 0 {
		t.Fatalf("noisy key: %d stored, %d key full, %d queue full, errors %v; want 5, 7, 0", ok, keyFull, full, other)
	}
	ok, full, keyFull, other = b.PublishAll(ctx, queue.Backlog, quiet)
	if len(other) > 0 || ok != 5 || keyFull+full != 0 {
		t.Fatalf("quiet key after the noisy one: %d stored, %d refused, errors %v; want all 5 stored", ok, keyFull+full, other)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("email", queue.Backlog)); n != 10 {
		t.Fatalf("the stream holds %d jobs, want 10", n)
	}
}

// The same job id published 5 times is stored once.
func TestRetriedPublishIsStoredOnce(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email"})
	j := queuetest.NewJob(t, "email", "k")
	var dups int
	for range 5 {
		s, err := b.Pub.Publish(ctx, queue.Ready, j)
		if err != nil {
			t.Fatal(err)
		}
		if s.Duplicate {
			dups++
		}
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("email", queue.Ready)); n != 1 || dups != 4 {
		t.Fatalf("5 publishes of one id: %d stored, %d acknowledged as duplicates; want 1 and 4", n, dups)
	}
}

// A job read back from its stream is the job that was published, and the
// raw key appears in no subject.
func TestJobRoundTrip(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email"})
	key := "tenant.42 *>\x00\xff"
	j := queuetest.NewJob(t, "email", key)
	j.Cost, j.Attempt = 3, 2
	j.NotBefore = time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC)
	j.Header = nats.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	s, err := b.Pub.Publish(ctx, queue.Backlog, j)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := b.JS.Stream(ctx, queue.StreamName("email", queue.Backlog))
	raw, err := st.GetMsg(ctx, s.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw.Subject, "tenant") || raw.Subject != queue.Subject("email", queue.Backlog, key) {
		t.Fatalf("subject %q", raw.Subject)
	}
	got, err := queue.ParseJob(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != j.ID || got.Key != key || got.Cost != 3 || got.Attempt != 2 || !got.NotBefore.Equal(j.NotBefore) ||
		!got.EnqueuedAt.Equal(j.EnqueuedAt) || string(got.Payload) != string(j.Payload) || got.Header.Get("Traceparent") != j.Header.Get("Traceparent") {
		t.Fatalf("read back %+v\nwant %+v", got, j)
	}
}

// EnsureStreams is idempotent and applies a changed capacity.
func TestEnsureStreamsIdempotent(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email", Capacity: 10})
	for _, c := range []int64{10, 20} {
		if err := queue.EnsureStreams(ctx, b.JS, queue.Config{Name: "email", Capacity: c}); err != nil {
			t.Fatal(err)
		}
		s, _ := b.JS.Stream(ctx, queue.StreamName("email", queue.Backlog))
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MaxMsgs != c || info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Discard != jetstream.DiscardNew {
			t.Fatalf("backlog config %+v, want MaxMsgs %d, work queue, discard new", info.Config, c)
		}
	}
}

// EnsureStreams with the settings a stream already has updates nothing
// (JetStream announces every update as an advisory); a change updates
// only the stream it concerns.
func TestEnsureStreamsUpdatesOnlyChanges(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email", Capacity: 10})
	nc := b.Server.Connect(t)
	updated := make(chan string, 16)
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.*", func(m *nats.Msg) {
		updated <- m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := queue.EnsureStreams(ctx, b.JS, queue.Config{Name: "email", Capacity: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if err := queue.EnsureStreams(ctx, b.JS, queue.Config{Name: "email", Capacity: 20}); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-updated:
		if name != queue.StreamName("email", queue.Backlog) {
			t.Errorf("stream %s updated, want only the backlog", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update advisory for the changed capacity")
	}
	// Another round trip, so that an advisory of the unchanged calls, had
	// there been one, has arrived.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JS.Stream(ctx, queue.StreamName("email", queue.Ready)); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-updated:
		t.Errorf("stream %s updated although its settings did not change", name)
	default:
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  queue.Config
		says string
	}{
		{queue.Config{}, "name"},
		{queue.Config{Name: "a.b"}, "character '.'"},
		{queue.Config{Name: "q", Capacity: -1}, "capacity -1"},
		{queue.Config{Name: "q", PerKeyCapacity: -1}, "per_key_capacity -1"},
		{queue.Config{Name: "q", Capacity: 5, PerKeyCapacity: 6}, "per_key_capacity 6 is larger than capacity 5"},
		{queue.Config{Name: "q", Replicas: 7}, "replicas 7"},
		{queue.Config{Name: "q", DuplicateWindow: -time.Second}, "duplicate_window"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, queue.ErrInvalidConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.says)
		}
	}
}

func TestParseJobNamesTheHeader(t *testing.T) {
	t.Parallel()
	good := func() nats.Header {
		return nats.Header{spillway.HeaderJobID: {"id"}, spillway.HeaderQueue: {"q"}, spillway.HeaderCost: {"1"},
			spillway.HeaderAttempt: {"0"}, queue.HeaderEnqueuedAt: {"2026-11-22T12:00:00Z"}}
	}
	if _, err := queue.ParseJob(good(), nil); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		spillway.HeaderJobID: "", spillway.HeaderQueue: "a.b", spillway.HeaderCost: "0", spillway.HeaderAttempt: "-1",
		queue.HeaderEnqueuedAt: "yesterday", spillway.HeaderNotBefore: "soon",
	} {
		h := good()
		h.Set(name, bad)
		if _, err := queue.ParseJob(h, nil); !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s %q: %v, want an error naming the header", name, bad, err)
		}
	}
}

// FuzzParseJob: no header set panics the parser.
func FuzzParseJob(f *testing.F) {
	f.Add("id", "q", "1", "0", "2026-11-22T12:00:00Z", "", "key")
	f.Add("", "a.b", "x", "-1", "bad", "bad", "\xff")
	f.Fuzz(func(t *testing.T, id, q, cost, attempt, enq, nb, key string) {
		h := nats.Header{spillway.HeaderJobID: {id}, spillway.HeaderQueue: {q}, spillway.HeaderCost: {cost},
			spillway.HeaderAttempt: {attempt}, queue.HeaderEnqueuedAt: {enq}, spillway.HeaderNotBefore: {nb}, spillway.HeaderKey: {key}}
		j, err := queue.ParseJob(h, []byte("p"))
		if err == nil && (j.ID == "" || j.Cost < 1 || j.Attempt < 0) {
			t.Fatalf("accepted %+v", j)
		}
	})
}

// Every caller gets its own PubAck: many concurrent publishes, each answered
// with the sequence that holds its own job, with the in-flight bound at 1,
// a few and the default.
func TestPublishAnswersEachCaller(t *testing.T) {
	t.Parallel()
	for _, maxInFlight := range []int{1, 7, 0} {
		t.Run(fmt.Sprint("max_in_flight=", maxInFlight), func(t *testing.T) {
			t.Parallel()
			ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email"})
			pub, err := queue.NewPublisher(b.JS, maxInFlight)
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			jobs := make([]*queue.Job, n)
			seqs := make([]uint64, n)
			for i := range jobs {
				jobs[i] = queuetest.NewJob(t, "email", fmt.Sprint("client-", i%13))
			}
			var wg sync.WaitGroup
			for i, j := range jobs {
				wg.Go(func() {
					s, err := pub.Publish(ctx, queue.Ready, j)
					if err != nil {
						t.Error(err)
						return
					}
					if s.Stream != queue.StreamName("email", queue.Ready) || s.Duplicate {
						t.Errorf("job %d: %+v", i, s)
					}
					seqs[i] = s.Sequence
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			st, err := b.JS.Stream(ctx, queue.StreamName("email", queue.Ready))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[uint64]bool{}
			for i, seq := range seqs {
				if seen[seq] {
					t.Fatalf("sequence %d answered twice", seq)
				}
				seen[seq] = true
				raw, err := st.GetMsg(ctx, seq)
				if err != nil {
					t.Fatal(err)
				}
				if id := raw.Header.Get(spillway.HeaderJobID); id != jobs[i].ID {
					t.Fatalf("caller of job %s was told sequence %d, which holds job %s", jobs[i].ID, seq, id)
				}
			}
		})
	}
}

// A context that has ended sends nothing.
func TestPublishEndedContextSendsNothing(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email"})
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err := b.Pub.Publish(ended, queue.Ready, queuetest.NewJob(t, "email", "k"))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("got %v, want a 'not sent' error wrapping context.Canceled", err)
	}
	if n := queuetest.Stored(t, ctx, b.JS, queue.StreamName("email", queue.Ready)); n != 0 {
		t.Fatalf("the stream holds %d jobs, want 0", n)
	}
}

// With no stream for the subject, Publish fails (after jetstream's retries
// for no responders) rather than waiting for its context. A caller that
// gives up first leaves its slot taken until that answer comes, then the
// slot serves the next publish.
func TestPublishWithoutStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	js := queuetest.Start(t).JetStream(t)
	pub, err := queue.NewPublisher(js, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "email", "k"))
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("got %v, want jetstream.ErrNoStreamResponse", err)
	}

	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	_, err = pub.Publish(short, queue.Ready, queuetest.NewJob(t, "email", "k"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may be stored") {
		t.Fatalf("got %v, want a 'may be stored' error wrapping context.DeadlineExceeded", err)
	}
	if err := queue.EnsureStreams(ctx, js, queue.Config{Name: "email"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "email", "k")); err != nil {
		t.Fatalf("after the abandoned publish was answered: %v", err)
	}
}

// The publisher sends Nats-Expected-Stream: a job whose subject another
// stream captures (its own stream missing) is refused, not stored there.
func TestPublishExpectsItsStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	js := queuetest.Start(t).JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"spillway.>"}}); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pub.Publish(ctx, queue.Ready, queuetest.NewJob(t, "email", "k"))
	const jsStreamNotMatch jetstream.ErrorCode = 10060 // nats-server: "expected stream does not match"
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != jsStreamNotMatch {
		t.Fatalf("got %v, want JetStream's expected-stream refusal (%d)", err, jsStreamNotMatch)
	}
	if n := queuetest.Stored(t, ctx, js, "OTHER"); n != 0 {
		t.Fatalf("OTHER holds %d messages, want 0", n)
	}
}

// A server restart with publishes in flight: every Publish returns — stored,
// or an error other than its context's — and publishing every job again
// with the same id stores each exactly once.
func TestPublishAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queue.Config{Name: "email"})
	const n = 400
	jobs := make([]*queue.Job, n)
	for i := range jobs {
		jobs[i] = queuetest.NewJob(t, "email", fmt.Sprint("client-", i%13))
	}
	someDone := make(chan struct{}) // n/8 publishes returned: the rest are on their way
	var mu sync.Mutex
	var ok int
	var failed []error
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			_, err := b.Pub.Publish(ctx, queue.Ready, j)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else {
				failed = append(failed, err)
			}
			if ok+len(failed) == n/8 {
				close(someDone)
			}
		})
	}
	<-someDone
	b.Server.Restart(t)
	wg.Wait()
	for _, err := range failed {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a publish waited for its context: %v", err)
		}
	}
	t.Logf("across the restart: %d stored, %d errors (first: %v)", ok, len(failed), firstErr(failed))

	for _, j := range jobs {
		for {
			_, err := b.Pub.Publish(ctx, queue.Ready, j)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("republishing %s: %v", j.ID, err)
			}
		}
	}
	if got := queuetest.Stored(t, ctx, b.JS, queue.StreamName("email", queue.Ready)); got != n {
		t.Fatalf("the stream holds %d jobs, want %d", got, n)
	}
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}
