package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The Redis faults of the reliability suite (docs/reliability.md):
// real admitter and worker processes under load while the test kills
// redis-server or flushes its script cache.

// rfSample is one submission of a load: what it got and when.
type rfSample struct {
	mode       string // the admitter's failure mode
	key        string
	sent, got  time.Time
	answer     answer
	admitted   bool
	refusedAll bool // answered 429
}

// rfLoad submits over HTTP from n goroutines per admitter, each at most once
// every period, with keys "<name>-0" .. "<name>-<keys-1>", recording every
// answer in led and in its samples, until stop is closed.
type rfLoad struct {
	mu      sync.Mutex
	samples []rfSample
	wg      sync.WaitGroup
	stop    chan struct{}
}

func rfStartLoad(t *testing.T, client *http.Client, led *ledger, q string, targets map[string]*process, n, keys int, every time.Duration) *rfLoad {
	t.Helper()
	l := &rfLoad{stop: make(chan struct{})}
	for name, p := range targets {
		for g := range n {
			l.wg.Go(func() {
				tick := time.NewTicker(every)
				defer tick.Stop()
				var mine []rfSample
				defer func() {
					l.mu.Lock()
					l.samples = append(l.samples, mine...)
					l.mu.Unlock()
				}()
				for i := 0; ; i++ {
					select {
					case <-l.stop:
						return
					case <-tick.C:
					}
					key := name + "-" + strconv.Itoa((g+i)%keys)
					s := rfSample{mode: name, key: key, sent: time.Now()}
					s.answer = submitHTTP(t, client, p.addr, q, map[string]string{"X-Client": key}, []byte(key))
					s.got = time.Now()
					s.admitted = s.answer.Reply.Status == spillway.Admitted
					s.refusedAll = s.answer.Code == http.StatusTooManyRequests
					led.record(s.answer)
					mine = append(mine, s)
				}
			})
		}
	}
	return l
}

// finish stops the load and returns every sample, oldest first.
func (l *rfLoad) finish() []rfSample {
	close(l.stop)
	l.wg.Wait()
	sort.Slice(l.samples, func(i, j int) bool { return l.samples[i].sent.Before(l.samples[j].sent) })
	return l.samples
}

// rfMetric sums the samples of a metric on a process's /metrics whose
// labels hold every one of match (`reason="limit"`, say).
func rfMetric(t *testing.T, client *http.Client, addr, name string, match ...string) float64 {
	t.Helper()
	resp, err := get(client, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", addr, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	return sum
}

// rfRedisDecisions is how many submissions an admitter's shared store
// decided (reasons limit and excess; the failure modes count as
// failure_mode_open, limit_local and unavailable).
func rfRedisDecisions(t *testing.T, client *http.Client, addr string) float64 {
	return rfMetric(t, client, addr, "spillway_decisions_total", `reason="limit"`) +
		rfMetric(t, client, addr, "spillway_decisions_total", `reason="excess"`)
}

// rfOutageConfig gives a decision a budget of 1s (redis.timeout, default
// 50ms) so that a loaded machine's stalls do not send decisions to the
// failure mode while Redis is up: a killed Redis refuses connections at
// once, whatever the budget.
const rfOutageConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", timeout: 1s}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 32, grace_period: 5s}
queues:
  - name: rf
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: %[4]d/s, burst: %[5]d, nodelay: true}
    backlog: {capacity: 10000, leak_rate: 100/s}
    handler: {http: {url: "%[3]s/rf", timeout: 5s}}
`

// maxFailoverBackoff is the longest time an admitter leaves an unreachable
// Redis alone before probing it again (internal/admit/failover.go).
const maxFailoverBackoff = 2 * time.Second

// TestReliabilityRedisKilled: three admitters, one per
// failure mode, under load on one Redis, with two workers running what
// they admit. Redis is killed (short: 3 s, full: 10 s) and restarted empty.
//   - Down: open admits every job; closed answers 503 with Retry-After and
//     the unavailable problem type; local applies the limits in memory (per
//     key ≤ burst + 1 + rate·t, and refuses the rest with 429).
//   - Back: each admitter's Redis decisions resume within 1 s + the
//     failover's longest backoff (2 s), read from its /metrics.
//   - After: the empty Redis forgot every bucket, so per key at most one
//     bucket more than the limit: admitted ≤ burst + 1 + rate·t over the
//     window from the moment Redis decides again.
//   - Ledgers: 0 lost among the jobs answered admitted, no answer other than
//     the mode's.
func TestReliabilityRedisKilled(t *testing.T) {
	const rate, burst = 20, 10 // per key: rate/s, burst, nodelay
	up := time.Duration(scale(1, 3)) * time.Second
	down := time.Duration(scale(3, 10)) * time.Second
	after := time.Duration(scale(3, 10)) * time.Second

	nats := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	hook := newWebhook(t)
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(rfOutageConfig, nats.URL(), rds.Addr(), hook.srv.URL, rate, burst))
	modes := []string{"open", "closed", "local"}
	adm := map[string]*process{}
	for _, m := range modes {
		adm[m] = start(t, "admitter-"+m, bins.admitter, "--config", cfg, "--failure-mode", m)
	}
	for i := range 2 {
		start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0")
	}
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}})
	t.Cleanup(client.CloseIdleConnections)

	led := newLedger()
	load := rfStartLoad(t, client, led, "rf", adm, 4, 2, 5*time.Millisecond)
	time.Sleep(up) // the load runs with Redis up for this long

	killing := time.Now()
	rds.Kill()
	killed := time.Now()
	t.Logf("Redis killed (kill took %v)", killed.Sub(killing).Round(time.Millisecond))
	time.Sleep(down) // the outage: the load runs without Redis

	// Before the restart: each admitter's Redis decisions so far.
	before := map[string]float64{}
	for _, m := range modes {
		before[m] = rfRedisDecisions(t, client, adm[m].addr)
	}
	restarting := time.Now()
	rds.Restart(t)
	back := time.Now()
	t.Logf("Redis restarted empty (restart took %v)", back.Sub(restarting).Round(time.Millisecond))

	// Recovery: poll every admitter's /metrics until its Redis decisions
	// grow again.
	recovered := map[string]time.Time{}
	var rmu sync.Mutex
	var pollers sync.WaitGroup
	for _, m := range modes {
		pollers.Go(func() {
			deadline := back.Add(30 * time.Second)
			for time.Now().Before(deadline) {
				at := time.Now()
				if rfRedisDecisions(t, client, adm[m].addr) > before[m] {
					rmu.Lock()
					recovered[m] = at
					rmu.Unlock()
					return
				}
				time.Sleep(20 * time.Millisecond) // the poll's period
			}
		})
	}
	pollers.Wait()
	time.Sleep(after) // the load runs on the empty Redis
	samples := load.finish()

	// Down.
	outage := restarting.Sub(killed)
	localBound := burst + 1 + int(math.Ceil(rate*outage.Seconds())) + 1
	perKey := map[string]int{}
	answered := map[string]map[int]int{}
	for _, s := range samples {
		if s.sent.Before(killed) || s.got.After(restarting) {
			continue
		}
		if answered[s.mode] == nil {
			answered[s.mode] = map[int]int{}
		}
		answered[s.mode][s.answer.Code]++
		switch s.mode {
		case "open":
			if !s.admitted {
				t.Errorf("open, Redis down: answer %d %+v; want 202 admitted", s.answer.Code, s.answer.Reply)
			}
		case "closed":
			if s.answer.Code != http.StatusServiceUnavailable || s.answer.RetryAfter == "" || s.answer.Reply.Type != spillway.ProblemUnavailable {
				t.Errorf("closed, Redis down: answer %d, Retry-After %q, type %q; want 503 with Retry-After and %s",
					s.answer.Code, s.answer.RetryAfter, s.answer.Reply.Type, spillway.ProblemUnavailable)
			}
		case "local":
			if !s.admitted && !s.refusedAll {
				t.Errorf("local, Redis down: answer %d %+v; want 202 or 429", s.answer.Code, s.answer.Reply)
			}
			if s.admitted {
				perKey[s.key]++
			}
		}
	}
	worstLocal := 0
	for _, n := range perKey {
		worstLocal = max(worstLocal, n)
	}
	for _, m := range modes {
		figure(t, "%s, Redis down %v: answers by HTTP status %v", m, outage.Round(time.Millisecond), answered[m])
		if len(answered[m]) == 0 {
			t.Errorf("%s: no answer while Redis was down; the load proves nothing", m)
		}
	}
	figure(t, "local, Redis down %v: at most %d admitted per key (limit allows %d: burst %d + 1 + %d/s · t + 1)",
		outage.Round(time.Millisecond), worstLocal, localBound, burst, rate)
	if worstLocal > localBound {
		t.Errorf("local: a key got %d jobs admitted while Redis was down %v; the limits allow %d", worstLocal, outage, localBound)
	}
	if answered["local"][http.StatusTooManyRequests] == 0 {
		t.Errorf("local: no 429 while Redis was down; the memory store did not limit")
	}

	// Back.
	for _, m := range modes {
		at, ok := recovered[m]
		if !ok {
			t.Errorf("%s: Redis never decided again within 30 s of its return", m)
			continue
		}
		took := max(0, at.Sub(back))
		figure(t, "%s: Redis decides again %v after it answers again (bound 1 s + backoff %v)", m, took.Round(time.Millisecond), maxFailoverBackoff)
		if took > time.Second+maxFailoverBackoff {
			t.Errorf("%s: Redis decided again only %v after it came back; want < 1 s + %v", m, took, maxFailoverBackoff)
		}
	}

	// After: per key, admitted since Redis decides again ≤ one bucket +
	// what the rate allows.
	for _, m := range modes {
		from, ok := recovered[m]
		if !ok {
			continue
		}
		if m == "closed" {
			// Every 202 or 429 after the restart came from the new Redis:
			// the window starts at its first decision.
			for _, s := range samples {
				if s.sent.After(restarting) && (s.admitted || s.refusedAll) {
					from = s.sent
					break
				}
			}
		}
		admitted := map[string]int{}
		var last time.Time
		for _, s := range samples {
			if s.mode != m || s.sent.Before(from) {
				continue
			}
			last = s.got
			if s.admitted {
				admitted[s.key]++
			}
			if m != "open" && !s.sent.Before(recovered[m]) && !s.admitted && !s.refusedAll {
				t.Errorf("%s, Redis deciding again: answer %d %+v; want 202 or 429", m, s.answer.Code, s.answer.Reply)
			}
		}
		window := last.Sub(from)
		bound := burst + 1 + int(math.Ceil(rate*window.Seconds())) + 1
		worst := 0
		for _, n := range admitted {
			worst = max(worst, n)
		}
		figure(t, "%s, after the restart: at most %d admitted per key over %v (one bucket %d + %d/s · t: ≤ %d), over-admission %+d",
			m, worst, window.Round(time.Millisecond), burst+1, rate, bound, worst-int(math.Ceil(rate*window.Seconds())))
		if worst > bound {
			t.Errorf("%s: a key got %d jobs admitted in the %v after Redis returned empty; ≤ one bucket more allows %d", m, worst, window, bound)
		}
	}

	r := settle(t, led, hook, nats.URL(), "rf", 60*time.Second)
	figure(t, "ledgers: %s; %s", r, led)
	if r.Lost != 0 {
		t.Errorf("%d jobs answered admitted never ran: %v", r.Lost, r.LostIDs)
	}
	if n := led.codes[-1]; n != 0 {
		t.Errorf("%d submissions got no answer at all", n)
	}
}

// TestReliabilityScriptFlush: SCRIPT FLUSH every second
// (and in the short run every 200 ms, for more flushes in less time) while
// two admitters are under load on one Redis → 0 answers other than 202 and
// 429, and every admitted job runs. The package-level proof is
// pkg/bucket/redisbucket TestScriptFlushNeverSurfaces (SCRIPT FLUSH in a
// loop under 32 deciders, single and batched runs).
func TestReliabilityScriptFlush(t *testing.T) {
	// Low enough that the load is over it however slow the machine: its
	// 8 keys take 80 jobs a second; a CI run with other packages beside
	// it sent 423 a second (53 a key, against 50 before: no 429 at all).
	const rate, burst = 10, 10
	length := time.Duration(scale(4, 60)) * time.Second
	every := time.Second
	if !full() {
		every = 200 * time.Millisecond
	}
	nats := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess()) // SCRIPT FLUSH is server-wide
	hook := newWebhook(t)
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(rfOutageConfig, nats.URL(), rds.Addr(), hook.srv.URL, rate, burst))
	adm := map[string]*process{}
	for i := range 2 {
		adm["admitter"+strconv.Itoa(i)] = start(t, "admitter"+strconv.Itoa(i), bins.admitter, "--config", cfg, "--failure-mode", "closed")
	}
	start(t, "worker", bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0")
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}})
	t.Cleanup(client.CloseIdleConnections)
	rc := redis.NewClient(&redis.Options{Addr: rds.Addr()})
	t.Cleanup(func() { _ = rc.Close() })

	led := newLedger()
	load := rfStartLoad(t, client, led, "rf", adm, 4, 4, 5*time.Millisecond)
	var flushes atomic.Int64
	deadline := time.Now().Add(length)
	tick := time.NewTicker(every)
	for time.Now().Before(deadline) {
		<-tick.C
		if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		flushes.Add(1)
	}
	tick.Stop()
	samples := load.finish()

	// NOSCRIPT answers the admitters got (and recovered from): EVALSHA
	// calls that failed, from Redis's command statistics.
	stats, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	noscript := "?"
	for _, line := range strings.Split(stats, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") {
			for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_evalsha:")), ",") {
				if strings.HasPrefix(f, "failed_calls=") {
					noscript = strings.TrimPrefix(f, "failed_calls=")
				}
			}
		}
	}

	codes := map[int]int{}
	for _, s := range samples {
		codes[s.answer.Code]++
		if s.answer.Code != http.StatusAccepted && s.answer.Code != http.StatusTooManyRequests {
			if codes[s.answer.Code] <= 3 {
				t.Errorf("answer %d %+v under SCRIPT FLUSH; want only 202 and 429", s.answer.Code, s.answer.Reply)
			}
		}
	}
	storeErrors := 0.0
	for _, p := range adm {
		storeErrors += rfMetric(t, client, p.addr, "spillway_store_errors_total")
	}
	r := settle(t, led, hook, nats.URL(), "rf", 60*time.Second)
	figure(t, "%d SCRIPT FLUSHes, one every %v, over %v under load: %d submissions, answers by HTTP status %v, %s EVALSHAs answered NOSCRIPT, %.0f store errors; ledgers: %s",
		flushes.Load(), every, length, len(samples), codes, noscript, storeErrors, r)
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusAccepted] == 0 {
		t.Errorf("answers %v: want both 202 and 429, or the limits were not exercised", codes)
	}
	if storeErrors != 0 {
		t.Errorf("%.0f store errors under SCRIPT FLUSH; want 0", storeErrors)
	}
	if r.Lost != 0 {
		t.Errorf("%d jobs answered admitted never ran: %v", r.Lost, r.LostIDs)
	}
}
