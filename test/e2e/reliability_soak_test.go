package e2e

// The reliability suite's soak (docs/reliability.md). Helpers of this file are prefixed soak.

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const soakConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 64, grace_period: 10s}
queues:
  # The soak: polite clients (10/s each) are admitted; noisy ones (25/s
  # each against 20/s) are queued up to the burst and rejected beyond it,
  # so the backlog holds a steady few dozen jobs.
  - name: soak
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 20/s, burst: 40, delay: 10}
    backlog: {capacity: 100000, per_key_capacity: 1000, leak_rate: 500/s}
    handler: {http: {url: "%[3]s/soak", timeout: 10s}}
`

// soakBook is a compact pair of ledgers for hours of traffic: answered
// jobs not yet run, runs not yet answered, and a hash of every run id
// (for extra executions), instead of every answer and every request.
type soakBook struct {
	mu       sync.Mutex
	pending  map[string]struct{} // answered admitted/queued, not run yet
	early    map[string]struct{} // run before its answer arrived
	runs     map[uint64]uint8    // executions by id hash
	accepted int
	ran      int
	extra    int
	answers  map[spillway.Status]int
	failures map[string]int // error answers: HTTP code or problem type
}

func newSoakBook() *soakBook {
	return &soakBook{pending: map[string]struct{}{}, early: map[string]struct{}{}, runs: map[uint64]uint8{}, answers: map[spillway.Status]int{}, failures: map[string]int{}}
}

func (b *soakBook) answer(a answer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.answers[a.Reply.Status]++
	switch a.Reply.Status {
	case spillway.Admitted, spillway.Queued:
		b.accepted++
		if _, ok := b.early[a.Reply.ID]; ok {
			delete(b.early, a.Reply.ID)
		} else {
			b.pending[a.Reply.ID] = struct{}{}
		}
	case spillway.Rejected:
	default:
		k := fmt.Sprintf("%d %s", a.Code, a.Reply.Type)
		if a.Reply.Type == "" {
			// A transport error (HTTP code -1, or a NATS request's
			// error): its text says what happened.
			k += a.Reply.Error
		}
		b.failures[k]++
	}
}

func (b *soakBook) executed(id string) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	k := h.Sum64()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.runs[k]++
	if b.runs[k] > 1 {
		b.extra++
		return
	}
	b.ran++
	if _, ok := b.pending[id]; ok {
		delete(b.pending, id)
	} else {
		b.early[id] = struct{}{}
	}
}

func (b *soakBook) counts() (accepted, ran, pending, early, extra int, answers map[spillway.Status]int, failures map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	answers, failures = map[spillway.Status]int{}, map[string]int{}
	for k, v := range b.answers {
		answers[k] = v
	}
	for k, v := range b.failures {
		failures[k] = v
	}
	return b.accepted, b.ran, len(b.pending), len(b.early), b.extra, answers, failures
}

// soakRSS is a process's resident set in KiB, from /proc/<pid>/status.
func soakRSS(pid int) (int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// soakSample is one look at the running system.
type soakSample struct {
	at         time.Duration
	rss        []int // KiB per process
	goroutines []int
	backlog    uint64 // BACKLOG stream of queue soak
	ready      uint64 // READY stream of queue soak (not yet acked)
	answers    int    // answers so far
	ran        int    // executions so far
}

// soakDuration reads SPILLWAY_SOAK: a Go duration, or anything else
// non-empty for 30 minutes; empty skips the soak.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("SPILLWAY_SOAK")
	if v == "" {
		t.Skip("the soak runs only with SPILLWAY_SOAK set (`make soak`, or SPILLWAY_SOAK=3m go test -run TestReliabilitySoak -v ./test/e2e/)")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 30 * time.Minute
	}
	return d
}

// TestReliabilitySoak: measures the admission capacity
// with a closed-loop burst (64 callers for 10 s, both doors, the soak
// queue's per-key limit over 4,000 keys so that everything is admitted), lets the workers drain it, then submits open loop at 70% of
// it for SPILLWAY_SOAK (polite clients admitted, noisy ones queued and
// rejected), sampling every few seconds each admitter's and worker's RSS
// (/proc/<pid>/status) and go_goroutines (/metrics), and the soak queue's
// BACKLOG and READY depths. After a warm-up of a fifth of the run, the
// medians of the last quarter of the samples must stay near those of the
// first quarter (RSS, goroutines, depths: flat), and when the load stops every answered job
// runs (0 lost).
func TestReliabilitySoak(t *testing.T) {
	d := soakDuration(t)
	every := 5 * time.Second
	if d > 10*time.Minute {
		every = 10 * time.Second
	}
	book := newSoakBook()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Spillway-Key"), "cap-") {
			book.executed(r.Header.Get("Spillway-Job-Id"))
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)
	ns := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(soakConfig, ns.URL(), rds.Addr(), hook.URL))
	var admitters, workers []*process
	for i := range 2 {
		admitters = append(admitters, start(t, "admitter"+strconv.Itoa(i), bins.admitter, "--config", cfg))
	}
	for i := range 2 {
		workers = append(workers, start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0"))
	}
	procs := append(append([]*process(nil), admitters...), workers...)
	// Idle connections are closed by the client before the admitter's
	// 2-minute IdleTimeout closes them: a POST sent on a connection the
	// server is closing fails, and Go retries only idempotent requests
	// (with an Idempotency-Key header, a POST is one). Those are the
	// client's failures, not the admitter's. The first 30-minute soak,
	// without this, had 2 HTTP transport errors in 6.4M submissions (their
	// text was not kept then; the book keeps it now).
	client := apitest.Client(t, &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second}})
	t.Cleanup(client.CloseIdleConnections)
	nc, err := nats.Connect(ns.URL(), nats.Name("e2e-soak"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &cluster{nats: ns, admitters: admitters}
	send := func(i int, q, key string) answer {
		var h map[string]string
		if key != "" {
			h = map[string]string{"X-Client": key}
		}
		return afSubmit(t, c, client, nc, i, q, h, []byte("soak"))
	}

	// Capacity: closed loop, 64 callers, 10 s.
	const capKeys = 4000
	var capAnswers, capFailed atomic.Int64
	capStop := make(chan struct{})
	var wg sync.WaitGroup
	capBegin := time.Now()
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i += 64 {
				select {
				case <-capStop:
					return
				default:
				}
				// The soak's own queue and decision path (a per-key
				// leaky bucket in Redis), over enough keys that none
				// reaches its limit: everything admitted.
				if a := send(i, "soak", "cap-"+strconv.Itoa(i%capKeys)); a.Reply.Status == spillway.Admitted {
					capAnswers.Add(1)
				} else {
					capFailed.Add(1)
				}
			}
		}()
	}
	time.Sleep(10 * time.Second) // the measurement's length, not a wait for an event
	close(capStop)
	wg.Wait()
	capTook := time.Since(capBegin)
	capacity := float64(capAnswers.Load()) / capTook.Seconds()
	drainBegin := time.Now()
	waitFor(t, 10*time.Minute, "the capacity burst to drain", func() bool {
		return afStreamMsgs(t, ns.URL(), queue.StreamName("soak", queue.Ready)) == 0
	})
	drainTook := time.Since(drainBegin)
	figure(t, "admission capacity (closed loop, 64 callers, both doors, %d keys of the soak queue, all admitted): %.0f/s (%d in %v, %d failed); its jobs drained %v after the burst",
		capKeys, capacity, capAnswers.Load(), capTook.Round(time.Millisecond), capFailed.Load(), drainTook.Round(time.Millisecond))

	// The soak: 70% of capacity, open loop.
	rate := 0.7 * capacity
	const noisyKeys, noisyRate, politeRate = 4, 25.0, 10.0
	if rate < 2*noisyKeys*noisyRate {
		t.Fatalf("capacity %.0f/s: too low for a soak whose noisy clients alone send %.0f/s", capacity, noisyKeys*noisyRate)
	}
	politeKeys := int((rate - noisyKeys*noisyRate) / politeRate)
	var sent, behind atomic.Int64
	work := make(chan func(), 4096)
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for range 512 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for f := range work {
				f()
			}
		}()
	}
	// generate sends rate/s, round-robin over keys, until stop.
	var gens sync.WaitGroup
	generate := func(prefix string, keys int, rate float64) {
		defer gens.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		begin := time.Now()
		n := 0
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				for due := int(now.Sub(begin).Seconds() * rate); n < due; n++ {
					i, key := n, prefix+strconv.Itoa(n%keys)
					f := func() { book.answer(send(i, "soak", key)) }
					select {
					case work <- f:
						sent.Add(1)
					default:
						behind.Add(1) // every sender busy: the load generator fell behind
					}
				}
			}
		}
	}
	soakBegin := time.Now()
	gens.Add(2)
	go generate("polite-", politeKeys, float64(politeKeys)*politeRate)
	go generate("noisy-", noisyKeys, noisyKeys*noisyRate)

	var samples []soakSample
	sample := func() soakSample {
		s := soakSample{at: time.Since(soakBegin)}
		for _, p := range procs {
			rss, err := soakRSS(p.cmd.Process.Pid)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			s.rss = append(s.rss, rss)
			s.goroutines = append(s.goroutines, int(afScrape(t, client, p.addr).sum("go_goroutines")))
		}
		s.backlog = afStreamMsgs(t, ns.URL(), queue.StreamName("soak", queue.Backlog))
		s.ready = afStreamMsgs(t, ns.URL(), queue.StreamName("soak", queue.Ready))
		_, ran, _, _, _, answers, _ := book.counts()
		for _, n := range answers {
			s.answers += n
		}
		s.ran = ran
		return s
	}
	tick := time.NewTicker(every)
	for time.Since(soakBegin) < d {
		<-tick.C
		s := sample()
		perSecond := 0.0
		if len(samples) > 0 {
			prev := samples[len(samples)-1]
			perSecond = float64(s.answers-prev.answers) / (s.at - prev.at).Seconds()
		}
		samples = append(samples, s)
		t.Logf("soak sample %v: RSS KiB %v, goroutines %v (admitters, workers), backlog %d, ready %d, %.0f answers/s, %d run",
			s.at.Round(time.Second), s.rss, s.goroutines, s.backlog, s.ready, perSecond, s.ran)
	}
	tick.Stop()
	close(stop)
	gens.Wait()
	close(work)
	senders.Wait()
	took := time.Since(soakBegin)

	// Every answered job runs.
	waitFor(t, 5*time.Minute, "every answered soak job to run", func() bool {
		_, _, pending, _, _, _, _ := book.counts()
		return pending == 0
	})
	accepted, ran, pending, early, extra, answers, failures := book.counts()
	dead := deadLetters(t, ns.URL(), "soak")

	// Flat: after a warm-up of a fifth of the run, compare the first and
	// the last quarter of the samples.
	warm := samples[len(samples)/5:]
	if len(warm) < 8 {
		t.Fatalf("only %d samples after the warm-up: run the soak longer than %v", len(warm), d)
	}
	head, tail := warm[:len(warm)/4], warm[len(warm)-len(warm)/4:]
	first, last := warm[0], samples[len(samples)-1]
	names := make([]string, len(procs))
	for i, p := range procs {
		names[i] = p.name
	}
	// Medians: the floor a leak raises, not the spikes a busy shared
	// machine makes (a burst of slow answers holds more goroutines for a
	// moment).
	for i, name := range names {
		hRSS, tRSS := soakMedian(head, func(s soakSample) int { return s.rss[i] }), soakMedian(tail, func(s soakSample) int { return s.rss[i] })
		hG, tG := soakMedian(head, func(s soakSample) int { return s.goroutines[i] }), soakMedian(tail, func(s soakSample) int { return s.goroutines[i] })
		figure(t, "%s: RSS %d → %d KiB (warm-up end → end; median %d → %d), goroutines %d → %d (median %d → %d)",
			name, first.rss[i], last.rss[i], hRSS, tRSS, first.goroutines[i], last.goroutines[i], hG, tG)
		if float64(tRSS) > 1.25*float64(hRSS)+16*1024 {
			t.Errorf("%s: RSS grew from a median of %d KiB to %d KiB", name, hRSS, tRSS)
		}
		if float64(tG) > 1.5*float64(hG)+50 {
			t.Errorf("%s: goroutines grew from a median of %d to %d", name, hG, tG)
		}
	}
	hB, tB := soakMedian(head, func(s soakSample) int { return int(s.backlog) }), soakMedian(tail, func(s soakSample) int { return int(s.backlog) })
	hR, tR := soakMedian(head, func(s soakSample) int { return int(s.ready) }), soakMedian(tail, func(s soakSample) int { return int(s.ready) })
	maxB := soakMax(warm, func(s soakSample) int { return int(s.backlog) })
	maxR := soakMax(warm, func(s soakSample) int { return int(s.ready) })
	figure(t, "backlog depth %d → %d (median %d → %d, max %d); READY depth %d → %d (median %d → %d, max %d)",
		first.backlog, last.backlog, hB, tB, maxB, first.ready, last.ready, hR, tR, maxR)
	if float64(tB) > 2*float64(hB)+100 {
		t.Errorf("backlog depth grew from a median of %d to %d", hB, tB)
	}
	if float64(tR) > 2*float64(hR)+rate { // a second of traffic
		t.Errorf("READY depth grew from a median of %d to %d: the workers fall behind", hR, tR)
	}
	total := 0
	for _, n := range answers {
		total += n
	}
	figure(t, "%v at %.0f/s open loop (70%% of %.0f/s; %d polite clients at %.0f/s, %d noisy at %.0f/s): %d sent (%.0f/s), %d not sent (generator behind), answers %v, failures %v",
		took.Round(time.Second), rate, capacity, politeKeys, politeRate, noisyKeys, noisyRate, sent.Load(), float64(total)/took.Seconds(), behind.Load(), answers, failures)
	var openDecisions, storeErrors float64
	for _, a := range admitters {
		m := afScrape(t, client, a.addr)
		openDecisions += m.sum("spillway_failure_mode_total")
		storeErrors += m.sum("spillway_store_errors_total")
	}
	figure(t, "Redis decision timeouts (default 50ms budget): %.0f store errors, %.0f decisions by the failure mode (open)", storeErrors, openDecisions)
	figure(t, "%d accepted, %d ran, %d lost, %d extra executions, %d ran without an accepted answer, %d dead letters", accepted, ran, pending, extra, early, len(dead))
	if pending != 0 {
		t.Errorf("%d accepted jobs lost", pending)
	}
	if len(failures) != 0 {
		t.Errorf("failed submissions at 70%% of capacity: %v", failures)
	}
	if len(dead) != 0 {
		t.Errorf("%d dead letters; the handler never fails", len(dead))
	}
}

func soakMax(ss []soakSample, f func(soakSample) int) int {
	m := 0
	for _, s := range ss {
		m = max(m, f(s))
	}
	return m
}

func soakMedian(ss []soakSample, f func(soakSample) int) int {
	if len(ss) == 0 {
		return 0
	}
	v := make([]int, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	sort.Ints(v)
	return v[len(v)/2]
}
