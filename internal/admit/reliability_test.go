package admit_test

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// This file holds the admitter-level Redis items of the reliability suite
// (docs/reliability.md): a slow Redis and admitters whose
// clocks disagree.

// rfFull reports whether the long version of the suite runs (make
// reliability).
func rfFull() bool { return os.Getenv("SPILLWAY_RELIABILITY") == "full" }

func rfScale[T any](short, long T) T {
	if rfFull() {
		return long
	}
	return short
}

// rfDelayProxy is a TCP proxy to Redis that holds everything the server
// sends for a settable delay before passing it on, in order: a slow Redis
// (or a slow network) without touching the server.
type rfDelayProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // ns
	live   atomic.Int64 // the proxy's own goroutines, for goroutine counts

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func rfStartDelayProxy(t *testing.T, target string) *rfDelayProxy {
	t.Helper()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rfDelayProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.goroutine(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *rfDelayProxy) Addr() string { return p.ln.Addr().String() }

// setDelay delays what the server sends from now on by d.
func (p *rfDelayProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *rfDelayProxy) goroutine(f func()) {
	p.wg.Add(1)
	p.live.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.live.Add(-1)
		f()
	}()
}

// track registers c; false if the proxy is closing (c is then closed).
func (p *rfDelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *rfDelayProxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *rfDelayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		s, err := new(net.Dialer).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			p.untrack(c)
			continue
		}
		if !p.track(s) {
			p.untrack(c)
			return
		}
		// Client to server at once; server to client after the delay.
		p.goroutine(func() {
			defer p.untrack(s)
			defer p.untrack(c)
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		type chunk struct {
			b   []byte
			due time.Time
		}
		chunks := make(chan chunk, 1024)
		p.goroutine(func() {
			defer close(chunks)
			for {
				buf := make([]byte, 32<<10)
				n, err := s.Read(buf)
				if n > 0 {
					chunks <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
				}
				if err != nil {
					return
				}
			}
		})
		p.goroutine(func() {
			defer p.untrack(c)
			defer p.untrack(s)
			for ch := range chunks {
				if wait := time.Until(ch.due); wait > 0 {
					time.Sleep(wait) // the injected fault itself: a slow server
				}
				if _, err := c.Write(ch.b); err != nil {
					return
				}
			}
		})
	}
}

func (p *rfDelayProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// rfPercentile is the q-quantile (0 < q ≤ 1) of sorted durations.
func rfPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// rfSample is one decision of a load: how long it took and who decided.
type rfSample struct {
	took time.Duration
	src  admit.Source
	err  error
	d    bucket.Decision
}

// rfLoad runs n goroutines deciding through f over keys, each at most once
// every period, until stop is closed, and returns every decision's sample.
func rfLoad(f *admit.Failover, l bucket.Limit, n, keys int, every time.Duration, stop <-chan struct{}) func() []rfSample {
	var (
		mu  sync.Mutex
		out []rfSample
		wg  sync.WaitGroup
	)
	for g := range n {
		wg.Go(func() {
			var mine []rfSample
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					out = append(out, mine...)
					mu.Unlock()
					return
				case <-tick.C:
				}
				tiers := []bucket.Tier{{Key: "client-" + strconv.Itoa((g+i)%keys), Limit: l}}
				begin := time.Now()
				d, src, err := f.DecideFrom(context.Background(), "q", tiers, 1)
				mine = append(mine, rfSample{took: time.Since(begin), src: src, err: err, d: d})
			}
		})
	}
	return func() []rfSample { wg.Wait(); return out }
}

// TestReliabilityRedisSlow: Redis answers slowly (a
// delaying TCP proxy between the admitter's client and redis-server) while
// 16 goroutines submit. Slower than the store timeout (redis.timeout,
// default 50ms: internal/config, applied by internal/conn to the client
// and to each round trip), every submission still answers within the
// timeout + ε and the failure mode decides (open: admitted without a
// store; closed: 503 unavailable with Retry-After; local: this process's
// memory store); slow but within the timeout, Redis still decides. Once
// Redis is fast again it decides again, and the admitter's goroutines are
// back to their count before the fault.
//
// Not parallel, and its modes one after the other: runtime.NumGoroutine
// counts the whole test binary, so nothing else may run meanwhile.
func TestReliabilityRedisSlow(t *testing.T) {
	const (
		// redis.timeout (default 50ms, config.DefaultStoreTimeout), set
		// higher here so that a loaded machine under -race does not stretch
		// a fast Redis's round trips past it.
		timeout = 200 * time.Millisecond
		// ε: scheduling and the failure mode's own work on a loaded machine.
		epsilon = 50 * time.Millisecond
	)
	srv := redistest.Start(t, redistest.WithOwnProcess())
	for _, mode := range []config.FailureMode{config.FailOpen, config.FailClosed, config.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			proxy := rfStartDelayProxy(t, srv.Addr())
			client, store, err := conn.Redis(conn.RedisConfig{URL: "redis://" + proxy.Addr() + "/0", Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			f, err := admit.NewFailover(store, mode)
			if err != nil {
				t.Fatal(err)
			}
			l, err := bucket.NewLeakyBucket(bucket.Rate{Count: 1000, Per: time.Second}, 1000, 1000)
			if err != nil {
				t.Fatal(err)
			}

			phase := func(name string, d time.Duration, delay time.Duration) []rfSample {
				proxy.setDelay(delay)
				stop := make(chan struct{})
				wait := rfLoad(f, l, 16, 8, 10*time.Millisecond, stop)
				time.Sleep(d) // the phase's length: load runs meanwhile
				close(stop)
				samples := wait()
				lat := make([]time.Duration, len(samples))
				bySrc := map[string]int{}
				for i, s := range samples {
					lat[i] = s.took
					k := [...]string{"redis", "local", "open", "closed"}[s.src]
					if s.err != nil && !errors.Is(s.err, admit.ErrStoreUnavailable) {
						k = "error: " + s.err.Error()
					}
					bySrc[k]++
				}
				slices.Sort(lat)
				p99 := rfPercentile(lat, 0.99)
				t.Logf("figure: %s: %s, Redis answers %v late: %d submissions, p50 %v, p99 %v, max %v (store timeout %v); decided by %v",
					t.Name(), name, delay, len(samples), rfPercentile(lat, 0.5).Round(time.Microsecond), p99.Round(time.Microsecond),
					lat[len(lat)-1].Round(time.Microsecond), timeout, bySrc)
				if delay > 0 && len(samples) < 50 {
					t.Errorf("%s: only %d submissions; the load proves little", name, len(samples))
				}
				if delay > 0 && p99 > timeout+epsilon {
					t.Errorf("%s: p99 %v, want ≤ the store timeout %v + %v", name, p99, timeout, epsilon)
				}
				return samples
			}

			phase("warm-up", 300*time.Millisecond, 0)
			runtime.GC()
			before := runtime.NumGoroutine() - int(proxy.live.Load())

			// Slow, within the timeout: Redis decides (a loaded machine may
			// stretch a round trip past the timeout now and then; the
			// failure mode then decides for a backoff of 100ms).
			slow := phase("slow", rfScale(time.Second, 10*time.Second), timeout/5)
			byRedis := 0
			for _, s := range slow {
				if s.err == nil && s.src == admit.FromPrimary {
					byRedis++
				}
			}
			if byRedis < len(slow)/2 {
				t.Errorf("Redis %v late, within the %v timeout, decided only %d of %d submissions", timeout/5, timeout, byRedis, len(slow))
			}

			// Slower than the timeout: the failure mode decides.
			taken := 0
			samples := phase("slower than the timeout", rfScale(1500*time.Millisecond, 20*time.Second), 3*timeout)
			for _, s := range samples {
				switch {
				case mode == config.FailOpen && s.src == admit.FromOpen:
					if s.err != nil || s.d.Verdict != bucket.Admitted {
						t.Fatalf("open: %+v, err %v; want admitted", s.d, s.err)
					}
					taken++
				case mode == config.FailClosed && s.src == admit.FromClosed:
					if !errors.Is(s.err, admit.ErrStoreUnavailable) || s.d.RetryAfter <= 0 {
						t.Fatalf("closed: %v, retry after %v; want ErrStoreUnavailable with a Retry-After", s.err, s.d.RetryAfter)
					}
					taken++
				case mode == config.FailLocal && s.src == admit.FromLocal:
					if s.err != nil {
						t.Fatalf("local: %v", s.err)
					}
					taken++
				case s.err != nil:
					t.Fatalf("%s: %v (source %d)", mode, s.err, s.src)
				}
			}
			t.Logf("figure: %s: failure mode %s took %d of %d submissions while Redis answered %v late", t.Name(), mode, taken, len(samples), 3*timeout)
			if taken < len(samples)*9/10 {
				t.Errorf("failure mode %s took %d of %d submissions with Redis slower than the timeout; want nearly all", mode, taken, len(samples))
			}

			// Fast again: Redis decides again (the failover probes after
			// at most its longest backoff, 500ms).
			proxy.setDelay(0)
			back := time.Now()
			admittest.WaitFor(t, 30*time.Second, "Redis deciding again", func() bool {
				_, src, err := f.DecideFrom(context.Background(), "q", []bucket.Tier{{Key: "probe", Limit: l}}, 1)
				return err == nil && src == admit.FromPrimary
			})
			t.Logf("figure: %s: Redis decides again %v after it is fast again", t.Name(), time.Since(back).Round(time.Millisecond))

			var after int
			admittest.WaitFor(t, 30*time.Second, "the goroutine count back to its count before the fault", func() bool {
				runtime.GC()
				after = runtime.NumGoroutine() - int(proxy.live.Load())
				return after <= before
			})
			t.Logf("figure: %s: goroutines (without the proxy's) %d before the fault, %d after", t.Name(), before, after)
		})
	}
}

const rfClockConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 5/s, burst: 20, delay: 10}
    backlog: {capacity: 100000, leak_rate: 1/s}
`

// TestReliabilitySkewedClocks: two admitters share one
// Redis while one's clock runs 90 s ahead (admit.Options.Now, the clock of
// its answers, and a store of its own). With the Redis store deciding at
// Redis TIME (production: no injected clock), the jobs both admit on one
// key are exactly what one clock allows: replaying every decision in the
// order Redis took them (their Redis times) through the pure algorithm
// gives the same verdicts, so 0 extra admissions. The control — two stores
// whose scripts are handed the admitters' own clocks — shows what the skew
// would cost.
func TestReliabilitySkewedClocks(t *testing.T) {
	t.Parallel()
	const skew = 90 * time.Second
	srv := redistest.Start(t, redistest.WithOwnProcess())
	nats := queuetest.Start(t)
	nc := nats.Connect(t)

	// One admitter as its process would build it: a store of its own
	// (internal/conn) and a clock.
	admitter := func(now func() time.Time, injected bool) *admit.Admitter {
		client, store, err := conn.Redis(conn.RedisConfig{URL: srv.URL(), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		if injected {
			if store, err = redisbucket.New(client, redisbucket.WithClock(now), redisbucket.WithTimeout(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		f, err := admit.NewFailover(store, config.FailClosed)
		if err != nil {
			t.Fatal(err)
		}
		core := admittest.NewCore(t, nc, rfClockConfig, f)
		o := core.Options()
		o.Now = now
		a, err := admit.New(core.Config, o)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ahead := func() time.Time { return time.Now().Add(skew) }
	d := rfScale(2*time.Second, 20*time.Second)

	// run fills key's bucket through a alone, then submits from 8
	// goroutines on each of a and b for d. It returns every decision and
	// how long it all took.
	//
	// It keeps only each decision's time and verdict: at a million
	// submissions and more, whole answers grew a slice of hundreds of MB
	// whose copies stalled the process past the store's 1 s budget.
	type decided struct {
		at      time.Time
		verdict bucket.Verdict
	}
	run := func(a, b *admit.Admitter, key string) ([]decided, bucket.Limit, time.Duration) {
		var (
			mu    sync.Mutex
			out   []decided
			limit bucket.Limit
			wg    sync.WaitGroup
		)
		begin := time.Now()
		for {
			ans, err := a.Submit(context.Background(), request("q", key))
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			out = append(out, decided{ans.Decision.At, ans.Decision.Verdict})
			limit = ans.Limit
			if ans.Reply.Status == spillway.Rejected {
				break
			}
		}
		deadline := time.Now().Add(d)
		for g := range 16 {
			wg.Go(func() {
				adm := []*admit.Admitter{a, b}[g%2]
				for time.Now().Before(deadline) {
					ans, err := adm.Submit(context.Background(), request("q", key))
					if err != nil {
						t.Errorf("submit: %v", err)
						return
					}
					mu.Lock()
					out = append(out, decided{ans.Decision.At, ans.Decision.Verdict})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return out, limit, time.Since(begin)
	}

	// replay decides every answer's job again, in the order of its
	// decision time, through the pure algorithm and one bucket: what a
	// single clock allows. It returns the extra jobs accepted.
	replay := func(answers []decided, l bucket.Limit) (accepted, want int) {
		sort.SliceStable(answers, func(i, j int) bool { return answers[i].at.Before(answers[j].at) })
		var b bucket.Bucket
		for _, ans := range answers {
			d, err := l.Decide(&b, ans.at, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict <= bucket.Queued {
				want++
			}
			if ans.verdict <= bucket.Queued {
				accepted++
			}
		}
		return accepted, want
	}

	answers, l, _ := run(admitter(time.Now, false), admitter(ahead, false), "shared")
	accepted, want := replay(answers, l)
	span := answers[len(answers)-1].at.Sub(answers[0].at)
	t.Logf("figure: %s: Redis TIME, one admitter's clock %v ahead: %d submissions over %v on one key, %d accepted, one clock allows %d: %+d extra",
		t.Name(), skew, len(answers), span.Round(time.Millisecond), accepted, want, accepted-want)
	if accepted != want {
		t.Errorf("two admitters with clocks %v apart accepted %d jobs; one clock allows exactly %d", skew, accepted, want)
	}
	if want < 21 {
		t.Errorf("only %d jobs allowed: the load proves little", want)
	}

	// Control: the stores decide at each admitter's own clock. One clock
	// allows at most the quota plus what leaks meanwhile.
	answers, l, took := run(admitter(time.Now, true), admitter(ahead, true), "control")
	accepted = 0
	for _, ans := range answers {
		if ans.verdict <= bucket.Queued {
			accepted++
		}
	}
	allowed := int(l.Quota()) + int(took.Seconds()*5) + 1
	t.Logf("figure: %s: control, each store on its admitter's clock (%v apart): %d submissions over %v, %d accepted where one clock allows at most %d",
		t.Name(), skew, len(answers), took.Round(time.Millisecond), accepted, allowed)
	if accepted <= allowed {
		t.Errorf("control: clocks %v apart accepted %d ≤ %d; the test cannot tell skew from none", skew, accepted, allowed)
	}
}
