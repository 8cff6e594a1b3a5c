package e2e

// The reliability suite (docs/reliability.md): nats-server itself dies (kill -9, file store) under
// load and comes back on the same port and store.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/proc"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// nfBin is the nats-server binary, built once per test binary from the
// module go.mod pins, into the directory TestMain removes at the end.
var nfBin struct {
	once sync.Once
	path string
	err  error
}

func nfNATSServerBinary(t *testing.T) string {
	t.Helper()
	nfBin.once.Do(func() {
		nfBin.path = filepath.Join(filepath.Dir(bins.admitter), "nats-server")
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", nfBin.path, "github.com/nats-io/nats-server/v2")
		if out, err := cmd.CombinedOutput(); err != nil {
			nfBin.err = fmt.Errorf("building nats-server: %w\n%s", err, out)
		}
	})
	if nfBin.err != nil {
		t.Fatal(nfBin.err)
	}
	return nfBin.path
}

// nfServer is nats-server with JetStream as a process of its own, so that
// it can be killed with SIGKILL and started again on its port and store.
type nfServer struct {
	t    *testing.T
	bin  string
	dir  string // JetStream store
	port int
	logs string

	cmd  *exec.Cmd
	done chan struct{}
	runs int
}

func nfStartServer(t *testing.T) *nfServer {
	t.Helper()
	s := &nfServer{t: t, bin: nfNATSServerBinary(t), dir: t.TempDir(), logs: t.TempDir()}
	var err error
	for try := 0; try < 5; try++ {
		if s.port, err = nfFreePort(); err != nil {
			t.Fatal(err)
		}
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(s.logs, "nats-server-"+strconv.Itoa(s.runs)+".log"))
			t.Logf("nats-server log (last 4 KiB):\n%s", tail(b, 4096))
		}
	})
	return s
}

func nfFreePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *nfServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// launch starts the server and returns once JetStream answers on it.
func (s *nfServer) launch() error {
	s.runs++
	logf, err := os.Create(filepath.Join(s.logs, "nats-server-"+strconv.Itoa(s.runs)+".log"))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(context.Background(), s.bin, "-js", "-sd", s.dir, "-p", strconv.Itoa(s.port), "-a", "127.0.0.1")
	cmd.Stdout, cmd.Stderr = logf, logf
	proc.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting nats-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := nfJetStreamAnswers(s.url()); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("nats-server on %s: JetStream not answering within 60s: %w", s.url(), err)
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("nats-server on %s exited at start:\n%s", s.url(), tail(b, 2048))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// nfJetStreamAnswers reports why JetStream on url does not answer, or nil.
func nfJetStreamAnswers(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.MaxReconnects(0), nats.Name("e2e-nats-probe"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *nfServer) kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
}

// nfTimeline is every answer's time and verdict, for the producers' view
// of an outage.
type nfTimeline struct {
	mu      sync.Mutex
	answers []nfAnswer
}

type nfAnswer struct {
	began, ended time.Time
	ok           bool // admitted or queued
	failed       bool // neither admitted, queued nor rejected: NATS or the admitter failed
	what         string
}

func (tl *nfTimeline) add(a nfAnswer) {
	tl.mu.Lock()
	tl.answers = append(tl.answers, a)
	tl.mu.Unlock()
}

// outage is the producers' view of an outage that began at killed: the
// first failed answer after it, the first good answer to a submission
// made after the kill (and after that failure), and how many answers
// failed between.
func (tl *nfTimeline) outage(killed time.Time) (firstFail, firstGood time.Time, failed int, kinds map[string]int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	kinds = map[string]int{}
	for _, a := range tl.answers {
		if a.failed && a.ended.After(killed) && (firstFail.IsZero() || a.ended.Before(firstFail)) {
			firstFail = a.ended
		}
	}
	from := killed
	if !firstFail.IsZero() {
		from = firstFail
	}
	for _, a := range tl.answers {
		if a.ok && a.began.After(killed) && a.ended.After(from) && (firstGood.IsZero() || a.ended.Before(firstGood)) {
			firstGood = a.ended
		}
	}
	for _, a := range tl.answers {
		if a.failed && a.ended.After(killed) && (firstGood.IsZero() || !a.ended.After(firstGood)) {
			failed++
			kinds[a.what]++
		}
	}
	return firstFail, firstGood, failed, kinds
}

// summary counts the answers that ended after t by what they were.
func (tl *nfTimeline) summary(t time.Time) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := map[string]int{}
	for _, a := range tl.answers {
		if a.ended.After(t) {
			switch {
			case a.ok:
				n["accepted"]++
			case a.failed:
				n["failed: "+a.what]++
			default:
				n["rejected"]++
			}
		}
	}
	return fmt.Sprint(n)
}

// nfMedMax is "median / max" of ds.
func nfMedMax(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("%v / %v", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// nfReconnect polls a process's /readyz every 10 ms and reports when it
// is ready again after having been not ready (connected to NATS again).
func nfReconnect(ctx context.Context, client *http.Client, addr string) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		defer close(out)
		sawDown := false
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			if err != nil {
				return
			}
			ready := false
			if resp, err := client.Do(req); err == nil {
				ready = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
			if !ready {
				sawDown = true
			} else if sawDown {
				out <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return out
}

const nfConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 16, grace_period: 5s, ack_wait: 2s}
queues:
  - name: nf
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 20/s, burst: 40, delay: 10}
    backlog: {capacity: 100000, leak_rate: 200/s}
    handler: {http: {url: "%[3]s/nf", timeout: 5s}}
`

// TestReliabilityNATSServerKill: nats-server, a process
// with its JetStream file store, is killed with SIGKILL under load and
// started again on the same port and store, 2 times (10 under `make
// reliability`). Producers submit over HTTP to two admitters all along;
// two workers run the jobs through the webhook. Every job answered
// admitted or queued completes or is dead-lettered (0 lost). Reported per
// kill: the producers' unavailability window (first failed answer to the
// first good one after it), each admitter's and worker's reconnect time
// (the restarted server answering to its /readyz turning ready again) and
// when the webhook saw the next job.
func TestReliabilityNATSServerKill(t *testing.T) {
	kills := scale(2, 10)
	srv := nfStartServer(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	hook := newWebhook(t)
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(nfConfig, srv.url(), rds.Addr(), hook.srv.URL))
	var procs []*process
	for i := range 2 {
		procs = append(procs, start(t, "admitter"+strconv.Itoa(i), bins.admitter, "--config", cfg))
	}
	for i := range 2 {
		procs = append(procs, start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0"))
	}
	admitters := procs[:2]
	client := apitest.Client(t, &http.Client{Timeout: 15 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	// The probe asks workers too, whose /readyz is not the admitter's API:
	// it is not checked against the admitter's contract.
	probe := &http.Client{Timeout: time.Second}
	t.Cleanup(probe.CloseIdleConnections)

	// Producers: 4 client keys, each submitting every 20 ms to the two
	// admitters in turn (≈ 200/s offered; per key 20/s are accepted,
	// admitted or queued for up to 1.5 s, the rest rejected by its limit).
	l, tl := newLedger(), &nfTimeline{}
	pctx, stopProducers := context.WithCancel(context.Background())
	var producers sync.WaitGroup
	for p := range 4 {
		producers.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				began := time.Now()
				a := submitHTTP(t, client, admitters[i%2].addr, "nf", map[string]string{"X-Client": "producer-" + strconv.Itoa(p)}, []byte(fmt.Sprintf("producer %d job %d", p, i)))
				if pctx.Err() != nil && a.Code == -1 {
					return // our own stop, not an answer
				}
				l.record(a)
				what := a.Reply.Type
				if what == "" {
					what = a.Reply.Error
				}
				tl.add(nfAnswer{began: began, ended: time.Now(), what: what,
					ok:     a.Reply.Status == spillway.Admitted || a.Reply.Status == spillway.Queued,
					failed: a.Reply.Status == spillway.Failed})
			}
		})
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopProducers()
			producers.Wait()
		}
	}
	t.Cleanup(stop)

	var windows, stalls, reconnects, resumes []time.Duration
	for k := 1; k <= kills; k++ {
		accepted0, ran0 := len(l.ids()), len(hook.snapshot())
		waitFor(t, 60*time.Second, "load before the kill", func() bool {
			return len(l.ids()) >= accepted0+50 && len(hook.snapshot()) >= ran0+50
		})
		rctx, stopPolls := context.WithTimeout(context.Background(), 2*time.Minute)
		polls := make([]<-chan time.Time, len(procs))
		for i, p := range procs {
			polls[i] = nfReconnect(rctx, probe, p.addr)
		}
		killed := time.Now()
		srv.kill()
		if err := srv.launch(); err != nil {
			stopPolls()
			t.Fatalf("kill %d: restarting nats-server: %v", k, err)
		}
		up := time.Now() // JetStream answers on the restarted server
		var back []string
		for i, p := range procs {
			select {
			case at, ok := <-polls[i]:
				if !ok {
					stopPolls()
					t.Fatalf("kill %d: %s never reported ready again", k, p.name)
				}
				d := max(0, at.Sub(up))
				reconnects = append(reconnects, d)
				back = append(back, fmt.Sprintf("%s %v", p.name, d.Round(time.Millisecond)))
			case <-time.After(2 * time.Minute):
				stopPolls()
				t.Fatalf("kill %d: %s not ready within 2 minutes of the restart", k, p.name)
			}
		}
		stopPolls()
		var firstFail, firstGood time.Time
		var failed int
		var kinds map[string]int
		deadline := time.Now().Add(60 * time.Second)
		for {
			firstFail, firstGood, failed, kinds = tl.outage(killed)
			if !firstGood.IsZero() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no good answer within 60s of the restart; since the kill: %s", k, tl.summary(killed))
			}
			time.Sleep(20 * time.Millisecond)
		}
		var nextJob time.Time
		waitFor(t, 60*time.Second, "the webhook to run a job after the restart", func() bool {
			for _, h := range hook.snapshot() {
				if h.At.After(up) {
					nextJob = h.At
					return true
				}
			}
			return false
		})
		window := time.Duration(0)
		if !firstFail.IsZero() {
			window = firstGood.Sub(firstFail)
		}
		windows = append(windows, window)
		stalls = append(stalls, firstGood.Sub(killed))
		resumes = append(resumes, nextJob.Sub(up))
		figure(t, "kill %d: nats-server down %v (kill -9 → JetStream answering again); producers: %d failed answers %v, unavailable %v (first failed → first good answer), first good answer %v after the kill; reconnected after the restart: %s; workers ran the next job %v after the restart (jobs whose requests were in flight at the kill wait out their timeouts)",
			k, up.Sub(killed).Round(time.Millisecond), failed, kinds, window.Round(time.Millisecond), firstGood.Sub(killed).Round(time.Millisecond),
			strings.Join(back, ", "), nextJob.Sub(up).Round(time.Millisecond))
	}
	stop()

	r := settle(t, l, hook, srv.url(), "nf", 2*time.Minute)
	figure(t, "%d kill -9 of nats-server (file store) under load: %s; answers: %s", kills, r, l)
	figure(t, "per kill (median / max over %d): unavailable (first failed → first good answer) %s; first good answer after the kill %s; admitter and worker reconnect after the restart %s; workers' next job after the restart %s",
		kills, nfMedMax(windows), nfMedMax(stalls), nfMedMax(reconnects), nfMedMax(resumes))
	if r.Lost != 0 {
		t.Errorf("%d acknowledged jobs lost (answered admitted or queued, never completed nor dead-lettered), e.g. %v", r.Lost, r.LostIDs)
	}
	if r.Accepted == 0 {
		t.Fatal("no job was accepted")
	}
	// The system still works: the processes were never restarted.
	for _, p := range procs {
		select {
		case <-p.done:
			t.Errorf("%s exited: %v", p.name, p.err)
		default:
		}
	}
}
