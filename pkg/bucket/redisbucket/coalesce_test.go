package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// trips is a go-redis hook that counts the store's round trips (a script
// call or a pipeline of them) and lets a test hold them.
type trips struct {
	n    atomic.Int64
	hold func(trip int64) // called before the trip is sent; nil: go on
}

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.trip()
		}
		return next(ctx, cmd)
	}
}

func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval") {
			h.trip()
		}
		return next(ctx, cmds)
	}
}

func (h *trips) trip() {
	n := h.n.Add(1)
	if h.hold != nil {
		h.hold(n)
	}
}

// signal is a channel closed once.
type signal struct {
	once sync.Once
	c    chan struct{}
}

func newSignal() *signal { return &signal{c: make(chan struct{})} }
func (s *signal) fire()  { s.once.Do(func() { close(s.c) }) }

func (s *signal) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func setupInternal(t *testing.T, hook *trips, opts ...Option) (*Store, *redis.Client) {
	t.Helper()
	return setupServer(t, redistest.Start(t), hook, opts...)
}

func setupServer(t *testing.T, srv *redistest.Server, hook *trips, opts ...Option) (*Store, *redis.Client) {
	t.Helper()
	o, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	// Neither the connection handshake nor a first NOSCRIPT may count as
	// a trip.
	if err := decideScript.Load(context.Background(), client).Err(); err != nil {
		t.Fatal(err)
	}
	client.AddHook(hook)
	s, err := New(client, append([]Option{WithPrefix(redistest.KeyPrefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

func limit(t *testing.T, spec bucket.Spec) bucket.Limit {
	t.Helper()
	l, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCoalescing holds the first round trip until every other caller has
// queued, and checks that they all go in one more round trip, decided
// exactly as one by one.
func TestCoalescing(t *testing.T) {
	for _, c := range []struct {
		name   string
		groups int
		flush  bool // SCRIPT FLUSH before the batch: its EVALSHAs answer NOSCRIPT
		trips  int64
	}{
		{"one_group", 1, false, 2},
		{"three_groups_pipelined", 3, false, 2},
		{"three_groups_after_script_flush", 3, true, 3},
		{"one_group_after_script_flush", 1, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const callers = 40
			first, release, queued := newSignal(), newSignal(), newSignal()
			hook := &trips{hold: func(n int64) {
				if n == 1 {
					first.fire()
					<-release.c
				}
			}}
			var srv *redistest.Server
			if c.flush {
				srv = redistest.Start(t, redistest.WithOwnProcess()) // SCRIPT FLUSH is server-wide
			} else {
				srv = redistest.Start(t)
			}
			s, client := setupServer(t, srv, hook, WithMaxInFlight(1))
			s.onQueue = func(n int) {
				if n == callers-1 {
					queued.fire()
				}
			}
			l := limit(t, bucket.Spec{Rate: "1/h", Burst: 9, Delay: 4})
			var accepted [3]atomic.Int64
			var wg sync.WaitGroup
			decide := func(i int) {
				g := i % c.groups
				d, err := s.Decide(context.Background(), fmt.Sprint("g", g), []bucket.Tier{{Key: "hot", Limit: l}}, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Verdict <= bucket.Queued {
					accepted[g].Add(1)
				}
			}
			wg.Go(func() { decide(0) })
			first.wait(t, "the first round trip")
			for i := 1; i < callers; i++ {
				wg.Go(func() { decide(i) })
			}
			queued.wait(t, "the other callers to queue")
			if c.flush {
				if err := client.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			release.fire()
			wg.Wait()
			if got := hook.n.Load(); got != c.trips {
				t.Errorf("%d round trips for %d decisions, want %d", got, callers, c.trips)
			}
			for g := range c.groups {
				if got := accepted[g].Load(); got != l.Quota() {
					t.Errorf("group %d: %d accepted, want the quota %d", g, got, l.Quota())
				}
			}
		})
	}
}

// TestCancelWhileQueued: a queued caller that gives up returns at once, and
// its decision is never made.
func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	first, release, queued := newSignal(), newSignal(), newSignal()
	hook := &trips{hold: func(n int64) {
		if n == 1 {
			first.fire()
			<-release.c
		}
	}}
	s, _ := setupInternal(t, hook, WithMaxInFlight(1))
	s.onQueue = func(int) { queued.fire() }
	tiers := []bucket.Tier{{Key: "k", Limit: limit(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 2})}}

	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := s.Decide(context.Background(), "g", tiers, 1); err != nil {
			t.Error(err)
		}
	})
	first.wait(t, "the first round trip")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Decide(ctx, "g", tiers, 1)
		errc <- err
	}()
	queued.wait(t, "the second caller to queue")
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not decided") {
			t.Errorf("error %v, want context.Canceled, not decided", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled caller did not return while the round trip was held")
	}
	release.fire()
	wg.Wait()
	// One token left: the cancelled decision took none.
	d, err := s.Decide(context.Background(), "g", tiers, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != bucket.Admitted || d.Remaining != 0 {
		t.Errorf("third decision: %s, %d remaining; want admitted, 0 remaining", d.Verdict, d.Remaining)
	}
	if got := hook.n.Load(); got != 2 {
		t.Errorf("%d round trips, want 2", got)
	}
}

// TestCancelWhileSent: callers whose decisions are on the wire when they give
// up: one riding along returns at once (the decision still applies), the
// one sending the batch finishes the round trip and reports the decision.
func TestCancelWhileSent(t *testing.T) {
	t.Parallel()
	first, release1, queued, second, release2 := newSignal(), newSignal(), newSignal(), newSignal(), newSignal()
	hook := &trips{hold: func(n int64) {
		switch n {
		case 1:
			first.fire()
			<-release1.c
		case 2:
			second.fire()
			<-release2.c
		}
	}}
	s, _ := setupInternal(t, hook, WithMaxInFlight(1))
	queuedB := newSignal()
	s.onQueue = func(n int) {
		switch n {
		case 1:
			queuedB.fire()
		case 2:
			queued.fire()
		}
	}
	tiers := []bucket.Tier{{Key: "k", Limit: limit(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 5})}}

	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := s.Decide(context.Background(), "g", tiers, 1); err != nil {
			t.Error(err)
		}
	})
	first.wait(t, "the first round trip")
	type result struct {
		d   bucket.Decision
		err error
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	ctxC, cancelC := context.WithCancel(context.Background())
	defer cancelB()
	defer cancelC()
	resB, resC := make(chan result, 1), make(chan result, 1)
	go func() {
		d, err := s.Decide(ctxB, "g", tiers, 1)
		resB <- result{d, err}
	}()
	queuedB.wait(t, "the first waiter to queue") // so that it leads the next batch
	go func() {
		d, err := s.Decide(ctxC, "g", tiers, 1)
		resC <- result{d, err}
	}()
	queued.wait(t, "two callers to queue")
	release1.fire()
	second.wait(t, "the second round trip, sent by the first waiter")
	cancelB()
	cancelC()
	select {
	case r := <-resC:
		if !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "may have been applied") {
			t.Errorf("rider: error %v, want context.Canceled, may have been applied", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled rider did not return while its round trip was held")
	}
	release2.fire()
	r := <-resB
	if r.err != nil || r.d.Verdict != bucket.Admitted {
		t.Errorf("sender: %+v %v, want its decision", r.d, r.err)
	}
	wg.Wait()
	d, err := s.Decide(context.Background(), "g", tiers, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 1 {
		t.Errorf("fourth decision: %d remaining, want 1: every sent decision applies", d.Remaining)
	}
}

// TestRandomCancellations: many callers with deadlines that expire anywhere
// in the machinery; nothing deadlocks, every error is the context's, and the
// store is idle afterwards.
func TestRandomCancellations(t *testing.T) {
	t.Parallel()
	s, _ := setupInternal(t, &trips{}, WithMaxBatch(8))
	tiers := []bucket.Tier{{Key: "k", Limit: limit(t, bucket.Spec{Rate: "1000000/s", Burst: 1000})}}
	var wg sync.WaitGroup
	var ok, cancelled atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13)%2000)*time.Microsecond)
				_, err := s.Decide(ctx, fmt.Sprint("g", g%2), tiers, 1)
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					cancelled.Add(1)
				default:
					t.Errorf("error %v, want nil or the deadline", err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight != 0 || len(s.queue) != 0 {
		t.Errorf("after all callers returned: %d round trips in flight, %d queued; want 0, 0", s.inFlight, len(s.queue))
	}
	t.Logf("%d decided, %d cancelled", ok.Load(), cancelled.Load())
}

// TestPanickingHook: a client hook that panics while a batch is on its way
// panics in the sender's goroutine only; the batch's other callers get an
// error and the store goes on working.
func TestPanickingHook(t *testing.T) {
	t.Parallel()
	const callers = 10
	first, release, queued := newSignal(), newSignal(), newSignal()
	hook := &trips{hold: func(n int64) {
		switch n {
		case 1:
			first.fire()
			<-release.c
		case 2:
			panic("hook bug")
		}
	}}
	s, _ := setupInternal(t, hook, WithMaxInFlight(1))
	s.onQueue = func(n int) {
		if n == callers-1 {
			queued.fire()
		}
	}
	tiers := []bucket.Tier{{Key: "k", Limit: limit(t, bucket.Spec{Rate: "1000/s", Burst: 100})}}
	var panics, errs atomic.Int64
	var wg sync.WaitGroup
	decide := func() {
		defer func() {
			if recover() != nil {
				panics.Add(1)
			}
		}()
		if _, err := s.Decide(context.Background(), "g", tiers, 1); err != nil {
			if !errors.Is(err, errPanicked) {
				t.Errorf("error %v, want errPanicked", err)
			}
			errs.Add(1)
		}
	}
	wg.Go(decide)
	first.wait(t, "the first round trip")
	for range callers - 1 {
		wg.Go(decide)
	}
	queued.wait(t, "the other callers to queue")
	release.fire()
	wg.Wait()
	if panics.Load() != 1 || errs.Load() != callers-2 {
		t.Errorf("%d panics and %d errors, want 1 and %d", panics.Load(), errs.Load(), callers-2)
	}
	if _, err := s.Decide(context.Background(), "g", tiers, 1); err != nil {
		t.Errorf("after the panic: %v", err)
	}
}
