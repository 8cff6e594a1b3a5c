package e2e

// The reliability suite's worker faults (docs/reliability.md), with the real binaries. Each test
// keeps both ledgers (every submission's answer, every webhook execution)
// and reconciles them. Helpers are prefixed wf_ (worker faults).
//
// Package-level tests of the same machinery, which these build on:
// pkg/queue TestKillWorkerLosesNothing (kill -9 of a worker process with
// no admitter), TestGracefulStop, TestPoisonJobIsDeadLetteredAfterMaxAttempts,
// TestPermanentErrorsAndPanics, TestHeartbeatsKeepLongJobs, and
// TestReliabilityPanickingHandler beside them.

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// wfQueue is the queue every test here works.
const wfQueue = "wf"

// wfOptions are the settings of one test's system.
type wfOptions struct {
	limits      string // the queue's limits: list
	ackWait     time.Duration
	grace       time.Duration
	concurrency int
	maxAttempts int
	retryFirst  time.Duration
	retryMax    time.Duration
	timeout     time.Duration // the HTTP handler's
}

const wfConfigText = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: %[3]d, grace_period: %[4]s, ack_wait: %[5]s}
queues:
  - name: ` + wfQueue + `
    limits: %[6]s
    backlog: {capacity: 20000, leak_rate: 200/s}
    retry: {max_attempts: %[7]d, initial: %[8]s, max: %[9]s}
    handler: {http: {url: "%[10]s", timeout: %[11]s}}
`

// wfSystem is one JetStream, one Redis, two admitters and worker
// processes, each worker with a webhook path of its own (/wf/<name>) so
// that every execution is known to come from one process.
type wfSystem struct {
	t         *testing.T
	opts      wfOptions
	nats      *queuetest.Server
	redis     *redistest.Server
	hook      *wfHook
	admitters []*process
	workers   []*wfWorker
	started   int
	client    *http.Client
}

// wfWorker is a worker process and its webhook path.
type wfWorker struct {
	*process
	path string
}

func (s *wfSystem) config(path string) string {
	o := s.opts
	return fmt.Sprintf(wfConfigText, s.nats.URL(), s.redis.Addr(), o.concurrency, o.grace, o.ackWait,
		o.limits, o.maxAttempts, o.retryFirst, o.retryMax, s.hook.srv.URL+path, o.timeout)
}

func wfStart(t *testing.T, o wfOptions, workers int) *wfSystem {
	t.Helper()
	s := &wfSystem{t: t, opts: o, nats: queuetest.Start(t), redis: redistest.Start(t, redistest.WithOwnProcess()), hook: wfNewHook(t)}
	s.client = apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(s.client.CloseIdleConnections)
	cfg := writeFile(t, "admitter.yaml", s.config("/wf/admitter"))
	for i := range 2 {
		s.admitters = append(s.admitters, start(t, "admitter"+strconv.Itoa(i), bins.admitter, "--config", cfg))
	}
	for range workers {
		s.workers = append(s.workers, s.startWorker())
	}
	return s
}

// startWorker starts one more worker process with a path of its own.
func (s *wfSystem) startWorker() *wfWorker {
	s.t.Helper()
	name := "worker" + strconv.Itoa(s.started)
	s.started++
	path := "/wf/" + name
	cfg := writeFile(s.t, name+".yaml", s.config(path))
	return &wfWorker{process: start(s.t, name, bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0"), path: path}
}

// inFlight reads the worker's spillway_jobs_in_flight gauge: handlers
// started and not yet settled (a success counts until its ack is
// confirmed).
func (s *wfSystem) inFlight(w *wfWorker) (int, error) {
	resp, err := get(s.client, "http://"+w.addr+"/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "spillway_jobs_in_flight{") && strings.Contains(line, `queue="`+wfQueue+`"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return int(v), err
		}
	}
	return 0, sc.Err() // not reported yet: no job started
}

// queueInfo is GET /v1/queues/wf from the first admitter.
func (s *wfSystem) queueInfo() (spillway.QueueInfo, error) {
	var qi spillway.QueueInfo
	resp, err := get(s.client, "http://"+s.admitters[0].addr+"/v1/queues/"+wfQueue)
	if err != nil {
		return qi, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return qi, fmt.Errorf("GET /v1/queues/%s: %s", wfQueue, resp.Status)
	}
	decodeJSON(s.t, resp.Body, &qi)
	return qi, nil
}

// settle reconciles the ledgers once every accepted job has completed or
// is dead (or d passed) and the streams are empty.
func (s *wfSystem) settle(l *ledger, d time.Duration) reconciliation {
	s.t.Helper()
	settle(s.t, l, s.hook.webhook, s.nats.URL(), wfQueue, d)
	waitFor(s.t, d, "READY and BACKLOG empty and nothing ack-pending", func() bool {
		qi, err := s.queueInfo()
		return err == nil && qi.Ready == 0 && qi.Depth == 0 && qi.InFlight == 0
	})
	// A duplicate execution would show up now, not later: nothing is left
	// in the streams to deliver.
	return reconcile(l, s.hook.executions(), deadLetters(s.t, s.nats.URL(), wfQueue))
}

// wfHook is the webhook with simulated work, a programmable answer, and
// gates that withhold the answers to one worker's path.
type wfHook struct {
	*webhook
	mu     sync.Mutex
	work   func(h hit) time.Duration // how long the "handler" runs
	answer func(h hit) int           // what it answers then (default 200)
	gates  map[string]*wfGate
}

// wfGate holds every answer to one path from the moment it is set.
type wfGate struct {
	held    int
	release chan struct{}
}

func wfNewHook(t *testing.T) *wfHook {
	h := &wfHook{webhook: newWebhook(t), gates: map[string]*wfGate{}}
	h.webhook.mu.Lock()
	h.webhook.respond = h.respond
	h.webhook.mu.Unlock()
	t.Cleanup(h.releaseAll) // before the server closes (cleanups run last first)
	return h
}

func (w *wfHook) set(work func(hit) time.Duration, answer func(hit) int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.work, w.answer = work, answer
}

func (w *wfHook) respond(r *http.Request, h hit) int {
	w.mu.Lock()
	work, answer := w.work, w.answer
	w.mu.Unlock()
	if work != nil {
		if d := work(h); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				timer.Stop()
				return http.StatusServiceUnavailable // nobody hears it
			}
		}
	}
	w.mu.Lock()
	g := w.gates[h.Path]
	if g != nil {
		g.held++
	}
	w.mu.Unlock()
	if g != nil {
		// Never answered while the worker lives: it is killed holding
		// this job. Not a success in the ledger.
		select {
		case <-g.release:
		case <-r.Context().Done():
		}
		return http.StatusServiceUnavailable
	}
	if answer != nil {
		return answer(h)
	}
	return http.StatusOK
}

// freeze withholds every answer to path from now on.
func (w *wfHook) freeze(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gates[path] = &wfGate{release: make(chan struct{})}
}

// held is how many requests to path are being withheld, or were.
func (w *wfHook) held(path string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.gates[path]; g != nil {
		return g.held
	}
	return 0
}

func (w *wfHook) releaseAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.gates {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}
}

// pending is the requests to path that have no answer yet.
func (w *wfHook) pending(path string) []hit {
	var out []hit
	for _, h := range w.snapshot() {
		if h.Path == path && h.Status == 0 {
			out = append(out, h)
		}
	}
	return out
}

// wfClient is one producer: a client key submitting every `every`.
type wfClient struct {
	key    string
	every  time.Duration
	header map[string]string
}

// wfLoad submits for every client, alternating admitters, until stopped,
// recording every answer in the ledger (and in onAnswer if set).
type wfLoad struct {
	stopCh   chan struct{}
	wg       sync.WaitGroup
	sent     atomic.Int64
	stopOnce sync.Once
}

func (s *wfSystem) load(l *ledger, clients []wfClient, onAnswer func(c wfClient, a answer)) *wfLoad {
	ld := &wfLoad{stopCh: make(chan struct{})}
	for ci, c := range clients {
		ld.wg.Go(func() {
			tick := time.NewTicker(c.every)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ld.stopCh:
					return
				case <-tick.C:
				}
				h := map[string]string{"X-Client": c.key}
				for k, v := range c.header {
					h[k] = v
				}
				ld.sent.Add(1)
				a := submitHTTP(s.t, s.client, s.admitters[(ci+i)%len(s.admitters)].addr, wfQueue, h, []byte(fmt.Sprintf("%s job %d", c.key, i)))
				l.record(a)
				if onAnswer != nil {
					onAnswer(c, a)
				}
			}
		})
	}
	s.t.Cleanup(ld.stop)
	return ld
}

func (ld *wfLoad) stop() {
	ld.stopOnce.Do(func() { close(ld.stopCh) })
	ld.wg.Wait()
}

// wfClients is n clients submitting every `every`, keys prefix-0...
func wfClients(prefix string, n int, every time.Duration) []wfClient {
	var cs []wfClient
	for i := range n {
		cs = append(cs, wfClient{key: prefix + "-" + strconv.Itoa(i), every: every})
	}
	return cs
}

// wfWork is a handler that takes between lo and hi.
func wfWork(lo, hi time.Duration) func(hit) time.Duration {
	return func(hit) time.Duration { return lo + rand.N(hi-lo+1) }
}

// wfAccepted is how many accepted answers the ledger holds.
func wfAccepted(l *ledger) int { return len(l.ids()) }

// kill -9 a worker holding in-flight jobs, again and again under
// steady load through both admitters, a new worker started after each
// kill. 0 lost; extra executions ≤ the jobs in flight at the kills; the
// ready consumer's ack-pending back to 0 within the ack wait once the load
// stops. (pkg/queue TestKillWorkerLosesNothing is the same fault without
// admitters and ledgers.)
//
// Just before each kill the webhook stops answering the victim and the
// test waits until every handler the victim has running is one held there
// (its in-flight gauge equals the held requests): so no answer is on its
// way back at the kill. Its in-flight jobs are those, plus any it starts
// in the moment between that check and the kill: every request of the
// victim that ended unanswered.
func TestReliabilityWorkerKill9(t *testing.T) {
	kills := scale(10, 100)
	const ackWait = 2 * time.Second
	s := wfStart(t, wfOptions{
		// 6 quiet clients under their limit (admitted), 3 loud ones over it
		// (queued for up to 1 s, then some rejected).
		limits:  `[{key: "header:X-Client", algorithm: leaky_bucket, rate: 10/s, burst: 20, delay: 10}]`,
		ackWait: ackWait, grace: 5 * time.Second, concurrency: 8,
		maxAttempts: 1000, retryFirst: 100 * time.Millisecond, retryMax: time.Second, timeout: 10 * time.Second,
	}, 2)
	s.hook.set(wfWork(20*time.Millisecond, 150*time.Millisecond), nil)
	l := newLedger()
	clients := append(wfClients("quiet", 6, 125*time.Millisecond), wfClients("loud", 3, 70*time.Millisecond)...)
	ld := s.load(l, clients, nil)
	waitFor(t, 30*time.Second, "the load to be running", func() bool { return wfAccepted(l) >= 50 })

	began := time.Now()
	type killed struct {
		path string
		at   time.Time
	}
	var victims []killed
	for k := range kills {
		i := k % len(s.workers)
		v := s.workers[i]
		waitFor(t, 30*time.Second, v.name+" to be running jobs", func() bool { return len(s.hook.pending(v.path)) > 0 })
		s.hook.freeze(v.path)
		waitFor(t, 30*time.Second, "every handler of "+v.name+" held at the webhook", func() bool {
			n, err := s.inFlight(v)
			return err == nil && n > 0 && n == s.hook.held(v.path)
		})
		v.kill()
		victims = append(victims, killed{v.path, time.Now()})
		s.workers[i] = s.startWorker()
	}
	killTime := time.Since(began)

	// Keep the load on until every job held at a kill has run again
	// elsewhere: the last kills' jobs come back after the ack wait.
	waitFor(t, 30*time.Second, "the held requests to end with their workers", func() bool {
		for _, v := range victims {
			if len(s.hook.pending(v.path)) > 0 {
				return false
			}
		}
		return true
	})
	// A victim's jobs in flight at its kill are its requests that ended
	// unanswered: the ones held at the webhook, and any it started between
	// the check above and the kill (still in their work then, so never
	// held). Its webhook answered nothing else but successes.
	heldIDs := map[string]bool{}
	unanswered := map[string]int{}
	for _, h := range s.hook.snapshot() {
		for _, v := range victims {
			if h.Path == v.path && h.Status != 0 && (h.Status < 200 || h.Status > 299) {
				heldIDs[h.ID] = true
				unanswered[v.path]++
			}
		}
	}
	waitFor(t, 60*time.Second, "every job held at a kill to run again", func() bool {
		e := s.hook.executions()
		for id := range heldIDs {
			if !e.succeeded[id] {
				return false
			}
		}
		return true
	})
	ld.stop()
	stopped := time.Now()
	var zeroAfter time.Duration
	waitFor(t, 30*time.Second, "ack-pending back to 0", func() bool {
		qi, err := s.queueInfo()
		if err == nil && qi.InFlight == 0 {
			zeroAfter = time.Since(stopped)
			return true
		}
		return false
	})

	r := s.settle(l, 2*time.Minute)
	inFlight, empty, most := 0, 0, 0
	for _, v := range victims {
		n := unanswered[v.path]
		if held := s.hook.held(v.path); n < held {
			t.Errorf("%s: %d requests held at the webhook, but only %d ended unanswered", v.path, held, n)
		}
		inFlight += n
		most = max(most, n)
		if n == 0 {
			empty++
		}
	}
	figure(t, "%d kills -9 in %v under load (%d submissions: %s)", kills, killTime.Round(time.Millisecond), ld.sent.Load(), l)
	figure(t, "%s", r)
	figure(t, "lost %d; extra executions %d ≤ %d jobs in flight at the kills (%d distinct: a job redelivered may be caught by a later kill; at most %d in one kill; %d kills with none)",
		r.Lost, r.Extra, inFlight, len(heldIDs), most, empty)
	figure(t, "ack-pending 0 after %v once the load stopped (ack wait %v)", zeroAfter.Round(time.Millisecond), ackWait)
	if r.Lost != 0 {
		t.Errorf("%d accepted jobs lost (e.g. %v)", r.Lost, r.LostIDs)
	}
	if r.Extra > inFlight {
		t.Errorf("%d extra executions, more than the %d jobs in flight at the kills", r.Extra, inFlight)
	}
	if r.Dead != 0 || r.Unanswered != 0 {
		t.Errorf("%d dead-lettered, %d ran without an accepted answer; want 0 and 0", r.Dead, r.Unanswered)
	}
	if zeroAfter > ackWait {
		t.Errorf("ack-pending back to 0 %v after the load stopped, want within the ack wait %v", zeroAfter, ackWait)
	}
}

// SIGTERM a worker under load: the jobs it runs finish within the
// grace period and are acked; what it holds (backlog jobs being paced) is
// handed back and run by the other worker. 0 lost, and no job runs twice.
func TestReliabilityWorkerSIGTERM(t *testing.T) {
	terms := scale(3, 30)
	const grace = 5 * time.Second
	s := wfStart(t, wfOptions{
		limits:  `[{key: "header:X-Client", algorithm: leaky_bucket, rate: 10/s, burst: 20, delay: 10}]`,
		ackWait: 10 * time.Second, grace: grace, concurrency: 8,
		maxAttempts: 5, retryFirst: 100 * time.Millisecond, retryMax: time.Second, timeout: 10 * time.Second,
	}, 2)
	// Handlers long enough to be caught mid-job, short enough for the grace.
	s.hook.set(wfWork(200*time.Millisecond, 800*time.Millisecond), nil)
	l := newLedger()
	// Loud clients over their limit keep the backlog busy: the drainer
	// holds queued jobs, to hand back at the SIGTERM.
	ld := s.load(l, append(wfClients("quiet", 6, 125*time.Millisecond), wfClients("loud", 3, 40*time.Millisecond)...), nil)
	waitFor(t, 30*time.Second, "the load to be running", func() bool { return wfAccepted(l) >= 50 })

	var totalExit, slowest time.Duration
	caught, depth := 0, 0
	for k := range terms {
		i := k % len(s.workers)
		v := s.workers[i]
		var pending []hit
		waitFor(t, 30*time.Second, v.name+" to be running jobs", func() bool {
			pending = s.hook.pending(v.path)
			return len(pending) >= 2
		})
		if qi, err := s.queueInfo(); err == nil {
			depth += int(qi.Depth)
		}
		at := time.Now()
		if err := v.stop(grace + 20*time.Second); err != nil {
			t.Fatalf("%s after SIGTERM: %v", v.name, err)
		}
		took := time.Since(at)
		slowest = max(slowest, took)
		totalExit += took
		caught += len(pending)
		// Every job running at the SIGTERM was answered, to the worker
		// that ran it, before it exited.
		answered := map[string]int{}
		for _, h := range s.hook.snapshot() {
			if h.Path == v.path {
				answered[h.ID] = h.Status
			}
		}
		for _, h := range pending {
			if st := answered[h.ID]; st < 200 || st > 299 {
				t.Errorf("job %s, running at %s's SIGTERM, ended with %d before it exited", h.ID, v.name, st)
			}
		}
		b, _ := os.ReadFile(v.log)
		if strings.Contains(string(b), "grace period over") {
			t.Errorf("%s ran out of its grace period", v.name)
		}
		s.workers[i] = s.startWorker()
	}
	ld.stop()
	r := s.settle(l, 2*time.Minute)
	figure(t, "%d SIGTERMs under load (%d submissions: %s)", terms, ld.sent.Load(), l)
	figure(t, "%s", r)
	figure(t, "%d jobs running at the SIGTERMs all finished before exit (%d jobs in the backlog at the SIGTERMs); exit took %v on average, %v at most (grace %v); lost %d, run twice %d",
		caught, depth, (totalExit / time.Duration(terms)).Round(time.Millisecond), slowest.Round(time.Millisecond), grace, r.Lost, r.Extra)
	if r.Lost != 0 {
		t.Errorf("%d accepted jobs lost (e.g. %v)", r.Lost, r.LostIDs)
	}
	if r.Extra != 0 {
		t.Errorf("%d executions beyond one per job: the shutdown caused redeliveries", r.Extra)
	}
	if r.Dead != 0 || r.Unanswered != 0 {
		t.Errorf("%d dead-lettered, %d ran without an accepted answer; want 0 and 0", r.Dead, r.Unanswered)
	}
	if slowest > grace {
		t.Errorf("a worker took %v to exit after SIGTERM, more than the grace period %v", slowest, grace)
	}
}

// wfDeadLetters is the DEAD stream's messages by job id.
func wfDeadLetters(t *testing.T, natsURL string) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	msgs, _ := streamMsgs(t, natsURL, queue.StreamName(wfQueue, queue.Dead))
	out := map[string]*jetstream.RawStreamMsg{}
	for _, m := range msgs {
		out[m.Header.Get(spillway.HeaderJobID)] = m
	}
	return out
}

// wfHeader reads a header whatever the case of its name (nats.Header is
// case-sensitive).
func wfHeader(h nats.Header, name string) string {
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// a handler that always fails (the webhook answers 500 for one
// key's jobs) → each of that key's jobs tried exactly max_attempts times
// and dead-lettered once with its id, headers, attempts and last error;
// the other keys' completion rate with the poison key present is within
// 5% of the rate without it, measured in the same run. (The panicking Go
// handler is pkg/queue TestReliabilityPanickingHandler.)
func TestReliabilityWorkerPoisonKey(t *testing.T) {
	const maxAttempts = 4
	phase := time.Duration(scale(5, 60)) * time.Second
	s := wfStart(t, wfOptions{
		limits:  `[{key: "header:X-Client", algorithm: leaky_bucket, rate: 1000/s, burst: 1000, nodelay: true}]`,
		ackWait: 10 * time.Second, grace: 5 * time.Second, concurrency: 16,
		maxAttempts: maxAttempts, retryFirst: 100 * time.Millisecond, retryMax: 400 * time.Millisecond, timeout: 10 * time.Second,
	}, 2)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	s.hook.set(wfWork(10*time.Millisecond, 50*time.Millisecond), func(h hit) int {
		if h.Key == "poison" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	healthy := newLedger()
	poison := newLedger()
	bodies := sync.Map{}   // poison job id → payload
	var submitted sync.Map // healthy job id → when it was answered
	ld := s.load(healthy, wfClients("healthy", 8, 100*time.Millisecond), func(c wfClient, a answer) {
		submitted.Store(a.Reply.ID, time.Now())
	})

	// completions counts healthy successes at the webhook in [from, to).
	completions := func(from, to time.Time) int {
		n := 0
		for _, h := range s.hook.snapshot() {
			if h.Key != "poison" && h.Status >= 200 && h.Status <= 299 && !h.At.Before(from) && h.At.Before(to) {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "healthy jobs completing", func() bool { return completions(time.Time{}, time.Now()) >= 20 })
	aStart := time.Now()
	waitFor(t, phase+time.Minute, "phase without poison", func() bool { return time.Since(aStart) >= phase })
	aEnd := time.Now()
	pl := s.load(poison, []wfClient{{key: "poison", every: 25 * time.Millisecond, header: map[string]string{"traceparent": traceparent}}},
		func(c wfClient, a answer) {
			if a.Reply.Status == spillway.Admitted || a.Reply.Status == spillway.Queued {
				bodies.Store(a.Reply.ID, true)
			}
		})
	bStart := time.Now()
	waitFor(t, phase+time.Minute, "phase with poison", func() bool { return time.Since(bStart) >= phase })
	bEnd := time.Now()
	pl.stop()
	ld.stop()

	// The rate achieved for the load offered: on a loaded machine the
	// test's own producers do not keep their ticks exactly, and their lag
	// is not the workers'.
	offered := func(from, to time.Time) float64 {
		n := 0
		submitted.Range(func(_, v any) bool {
			if at := v.(time.Time); !at.Before(from) && at.Before(to) {
				n++
			}
			return true
		})
		return float64(n) / to.Sub(from).Seconds()
	}
	rateA := float64(completions(aStart, aEnd)) / aEnd.Sub(aStart).Seconds()
	rateB := float64(completions(bStart, bEnd)) / bEnd.Sub(bStart).Seconds()
	offA, offB := offered(aStart, aEnd), offered(bStart, bEnd)
	drop := 100 * (rateA/offA - rateB/offB) / (rateA / offA)

	rh := s.settle(healthy, 2*time.Minute)
	rp := reconcile(poison, s.hook.executions(), deadLetters(t, s.nats.URL(), wfQueue))
	dead := wfDeadLetters(t, s.nats.URL())
	runs := s.hook.executions().runs
	wrongTries, badLetters := 0, 0
	for _, id := range poison.ids() {
		if runs[id] != maxAttempts {
			wrongTries++
			if wrongTries <= 5 {
				t.Errorf("poison job %s ran %d times, want exactly %d", id, runs[id], maxAttempts)
			}
		}
		d := dead[id]
		if d == nil {
			badLetters++
			t.Errorf("poison job %s has no dead letter", id)
			continue
		}
		want := map[string]string{
			spillway.HeaderJobID:   id,
			spillway.HeaderQueue:   wfQueue,
			spillway.HeaderKey:     "poison",
			spillway.HeaderAttempt: strconv.Itoa(maxAttempts),
			queue.HeaderDeadReason: fmt.Sprintf("attempts exhausted (%d of %d)", maxAttempts, maxAttempts),
			"traceparent":          traceparent, // the admitter carries it lower-case
		}
		for h, v := range want {
			if got := wfHeader(d.Header, h); got != v {
				badLetters++
				if badLetters <= 5 {
					t.Errorf("dead letter of %s: %s = %q, want %q", id, h, got, v)
				}
			}
		}
		if le := d.Header.Get(queue.HeaderLastError); !strings.Contains(le, "500") || !strings.Contains(le, "/wf/worker") {
			badLetters++
			t.Errorf("dead letter of %s: last error %q, want the webhook's 500", id, le)
		}
		if !strings.HasPrefix(string(d.Data), "poison job ") {
			badLetters++
			t.Errorf("dead letter of %s: payload %q", id, d.Data)
		}
	}
	deadHealthy := 0
	for id := range dead {
		if _, ok := bodies.Load(id); !ok {
			deadHealthy++
		}
	}
	figure(t, "healthy keys: %.2f jobs/s completed of %.2f/s offered without the poison key, %.2f/s of %.2f/s with it (%.2f%% drop, over %v each)", rateA, offA, rateB, offB, drop, phase)
	figure(t, "healthy: %s", rh)
	figure(t, "poison: %s; %d jobs each tried %d times (%d not), %d dead letters, %d with a wrong field", rp, len(poison.ids()), maxAttempts, wrongTries, len(dead), badLetters)
	if rh.Lost != 0 || rh.Extra != 0 || rh.Dead != 0 {
		t.Errorf("healthy jobs: %s; want 0 lost, 0 extra, 0 dead", rh)
	}
	if rp.Lost != 0 || rp.Dead != len(poison.ids()) || len(poison.ids()) == 0 {
		t.Errorf("poison jobs: %s; want every one dead-lettered", rp)
	}
	if deadHealthy != 0 || len(dead) != len(poison.ids()) {
		t.Errorf("%d dead letters for %d poison jobs (%d of other keys): want one each", len(dead), len(poison.ids()), deadHealthy)
	}
	if drop >= 5 {
		t.Errorf("healthy keys' completion rate dropped %.2f%% with the poison key present (%.2f/s of %.2f/s → %.2f/s of %.2f/s), want < 5%%", drop, rateA, offA, rateB, offB)
	}
}

// handlers three times slower than the ack wait, kept alive by
// heartbeats: every job runs once. Some go through the backlog, where the
// drainer holds them past the ack wait until their start.
func TestReliabilityWorkerSlowHandler(t *testing.T) {
	const ackWait = 2 * time.Second
	work := time.Duration(scale(3, 10)) * ackWait
	jobs := scale(12, 40)
	s := wfStart(t, wfOptions{
		// rate 2/s, delay 2: a burst of 12 on one key is 3 admitted and 9
		// queued, the last 4.5 s (2.25 ack waits) out.
		limits:  `[{key: "header:X-Client", algorithm: leaky_bucket, rate: 2/s, burst: 100, delay: 2}]`,
		ackWait: ackWait, grace: 5 * time.Second, concurrency: 64,
		maxAttempts: 5, retryFirst: 100 * time.Millisecond, retryMax: time.Second,
		timeout: work + 30*time.Second, // the handler timeout outlasts the slow handler
	}, 2)
	s.hook.set(func(hit) time.Duration { return work }, nil)
	l := newLedger()
	keys := max(1, jobs/12)
	answers := burst(jobs, func(i int) answer {
		return submitHTTP(t, s.client, s.admitters[i%2].addr, wfQueue, map[string]string{"X-Client": "slow-" + strconv.Itoa(i%keys)}, []byte("slow job "+strconv.Itoa(i)))
	})
	var latest time.Duration
	for _, a := range answers {
		l.record(a)
		if a.Reply.NotBefore != nil {
			latest = max(latest, time.Until(*a.Reply.NotBefore))
		}
	}
	r := s.settle(l, work+2*time.Minute)
	runs := s.hook.executions().runs
	dups := 0
	for _, id := range l.ids() {
		if runs[id] > 1 {
			dups += runs[id] - 1
		}
	}
	figure(t, "%d jobs (%d queued, the last %v out) each running %v against an ack wait of %v: %s", len(l.ids()), l.count(spillway.Queued),
		latest.Round(time.Millisecond), work, ackWait, r)
	figure(t, "duplicate executions: %d", dups)
	if len(l.ids()) != jobs {
		t.Fatalf("%d of %d jobs accepted: %s", len(l.ids()), jobs, l)
	}
	if r.Lost != 0 || r.Completed != jobs || dups != 0 {
		t.Errorf("%s; want every job run once", r)
	}
	if l.count(spillway.Queued) == 0 || latest < ackWait {
		t.Errorf("no queued job waited past the ack wait (latest start %v out): the backlog's heartbeats went untested", latest)
	}
}
