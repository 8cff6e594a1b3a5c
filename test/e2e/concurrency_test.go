package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// concConfig is one queue whose tenants may each run 2 jobs at once
// across all workers, with a short ack wait:
// fmt.Sprintf(concConfig, natsURL, redisAddr, webhookURL).
const concConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open}
http: {listen: "127.0.0.1:0"}
worker: {ack_wait: 3s, grace_period: 5s}
queues:
  - name: conc
    limits: [{key: "header:X-Tenant", rate: 1000/s, burst: 1000, nodelay: true}]
    backlog: {capacity: 1000, leak_rate: 50/s}
    concurrency:
      - {name: per-tenant, key: "header:X-Tenant", max: 2}
    handler: {http: {url: "%[3]s", timeout: 30s}}
`

// concCall is one handler call that reached the recording webhook.
type concCall struct {
	id, tenant, worker string
	start, end         time.Time // end zero while it runs
	status             int
}

// concHook records each call's start and end, per tenant counts the
// calls running at once, and holds each call for hold (or, while block
// is set, until unblocked or the caller goes).
type concHook struct {
	srv *httptest.Server

	mu      sync.Mutex
	calls   []concCall
	running map[string]int
	peak    map[string]int
	hold    time.Duration
	block   chan struct{} // nil: calls are held for hold only
}

func newConcHook(t *testing.T, hold time.Duration) *concHook {
	h := &concHook{running: map[string]int{}, peak: map[string]int{}, hold: hold}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := concCall{id: r.Header.Get(spillway.HeaderJobID), tenant: r.Header.Get(spillway.HeaderKey), worker: strings.TrimPrefix(r.URL.Path, "/"), start: time.Now()}
		h.mu.Lock()
		i := len(h.calls)
		h.calls = append(h.calls, c)
		h.running[c.tenant]++
		h.peak[c.tenant] = max(h.peak[c.tenant], h.running[c.tenant])
		block := h.block
		h.mu.Unlock()
		status := http.StatusOK
		if block != nil {
			select {
			case <-block:
			case <-r.Context().Done():
				status = 0 // the worker went
			}
		}
		select {
		case <-time.After(h.hold):
		case <-r.Context().Done():
			status = 0
		}
		h.mu.Lock()
		h.running[c.tenant]--
		h.calls[i].end, h.calls[i].status = time.Now(), status
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *concHook) snapshot() []concCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]concCall(nil), h.calls...)
}

func (h *concHook) peaks() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.peak {
		out[k] = v
	}
	return out
}

// concSystem starts a JetStream, a Redis, an admitter and n worker
// processes, each worker calling the webhook at a path of its own
// (/w<i>), and returns the admitter's address and the workers.
func concSystem(t *testing.T, hook *concHook, n int) (string, []*process) {
	t.Helper()
	ns, rs := queuetest.Start(t), redistest.Start(t, redistest.WithOwnProcess())
	adm := start(t, "admitter", bins.admitter, "--config", writeFile(t, "admitter.yaml", fmt.Sprintf(concConfig, ns.URL(), rs.Addr(), hook.srv.URL+"/admitter")))
	var workers []*process
	for i := range n {
		name := "w" + strconv.Itoa(i)
		cfg := writeFile(t, name+".yaml", fmt.Sprintf(concConfig, ns.URL(), rs.Addr(), hook.srv.URL+"/"+name))
		workers = append(workers, start(t, name, bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0"))
	}
	return adm.addr, workers
}

// concSubmit submits a job of tenant and returns its id.
func concSubmit(t *testing.T, client *http.Client, adm, tenant string) string {
	t.Helper()
	a := submitHTTP(t, client, adm, "conc", map[string]string{"X-Tenant": tenant}, []byte(`{}`))
	if a.Reply.Status != spillway.Admitted {
		t.Fatalf("a job of %s: %d %+v, want admitted", tenant, a.Code, a.Reply)
	}
	return a.Reply.ID
}

// TestKeyConcurrencyAcrossWorkerProcesses: tenant A may run 2 jobs at
// once. 12 jobs of A, each held 300 ms by the webhook, then 2 of B, on two
// worker processes: never more than 2 of A (or of B) at the webhook at
// once; B's first job starts within 0.8 s of its submission, not behind
// A's; every job runs exactly once.
func TestKeyConcurrencyAcrossWorkerProcesses(t *testing.T) {
	hook := newConcHook(t, 300*time.Millisecond)
	adm, _ := concSystem(t, hook, 2)
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)

	ids := map[string]string{} // id → tenant
	for range 12 {
		ids[concSubmit(t, client, adm, "A")] = "A"
	}
	submittedB := time.Now()
	for range 2 {
		ids[concSubmit(t, client, adm, "B")] = "B"
	}
	// The listing shows A's running jobs by its key's hash, at most 2.
	hashA, sawA := queue.KeyHash("A"), 0
	waitFor(t, 10*time.Second, "the keys listing showing A's running jobs", func() bool {
		resp, err := get(client, "http://"+adm+"/v1/queues/conc/keys")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var kl spillway.KeyList
		decodeJSON(t, resp.Body, &kl)
		for _, k := range kl.Concurrency {
			if k.Name == "per-tenant" && k.KeyHash == hashA {
				if k.Running > 2 {
					t.Errorf("the listing shows %d of A running, want at most 2", k.Running)
				}
				sawA = max(sawA, k.Running)
			}
		}
		return sawA > 0
	})
	waitFor(t, 60*time.Second, "14 jobs answered by the webhook", func() bool {
		done := 0
		for _, c := range hook.snapshot() {
			if !c.end.IsZero() && c.status == http.StatusOK {
				done++
			}
		}
		return done >= 14
	})
	calls := hook.snapshot()
	ran := map[string]int{}
	var firstB time.Time
	workers := map[string]int{}
	for _, c := range calls {
		ran[c.id]++
		workers[c.worker]++
		if c.tenant == "B" && (firstB.IsZero() || c.start.Before(firstB)) {
			firstB = c.start
		}
	}
	for id, tenant := range ids {
		if ran[id] != 1 {
			t.Errorf("job %s of %s ran %d times, want once", id, tenant, ran[id])
		}
	}
	if len(calls) != len(ids) {
		t.Errorf("%d calls for %d jobs", len(calls), len(ids))
	}
	if p := hook.peaks(); p["A"] > 2 || p["B"] > 2 {
		t.Errorf("peak calls at once per tenant %v, want at most 2", p)
	}
	if wait := firstB.Sub(submittedB); wait > 800*time.Millisecond {
		t.Errorf("B's first job started %v after its submission, want ≤ 0.8s", wait)
	} else {
		t.Logf("B's first job started %v after its submission; calls per worker %v", wait.Round(time.Millisecond), workers)
	}
}

// TestKeyConcurrencyWorkerKilled: a worker process killed (SIGKILL) while
// it runs A's jobs, so holding A's slots: A's jobs run again within the
// ack wait (3 s) of the kill, never more than 2 at once among the live
// calls, and every job finishes.
func TestKeyConcurrencyWorkerKilled(t *testing.T) {
	hook := newConcHook(t, 300*time.Millisecond)
	hook.block = make(chan struct{})
	adm, workers := concSystem(t, hook, 2)
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)

	ids := map[string]bool{}
	for range 8 {
		ids[concSubmit(t, client, adm, "A")] = true
	}
	waitFor(t, 30*time.Second, "2 of A's jobs at the webhook", func() bool { return len(hook.snapshot()) >= 2 })
	victim := hook.snapshot()[0].worker
	var killed *process
	for i, w := range workers {
		if "w"+strconv.Itoa(i) == victim {
			killed = w
		}
	}
	killed.kill()
	killedAt := time.Now()
	hook.mu.Lock()
	close(hook.block) // later calls are held 300 ms only
	hook.block = nil
	hook.mu.Unlock()

	waitFor(t, 60*time.Second, "every job answered", func() bool {
		done := map[string]bool{}
		for _, c := range hook.snapshot() {
			if c.status == http.StatusOK {
				done[c.id] = true
			}
		}
		return len(done) == len(ids)
	})
	calls := hook.snapshot()
	var again time.Time // the first start of one of A's jobs after the kill
	for _, c := range calls {
		if c.start.After(killedAt) && (again.IsZero() || c.start.Before(again)) {
			again = c.start
		}
		if c.worker == victim && c.start.After(killedAt) {
			t.Errorf("the killed worker called the webhook after its kill: %+v", c)
		}
	}
	if took := again.Sub(killedAt); took > 3*time.Second+time.Second {
		t.Errorf("A's jobs ran again %v after the kill, want within the ack wait (3s, and a second's slack)", took)
	} else {
		t.Logf("A's jobs ran again %v after the kill", took.Round(time.Millisecond))
	}
	// The killed worker's calls end with its connections, before its
	// slots are taken over.
	if p := hook.peaks(); p["A"] > 2 {
		t.Errorf("%d of A's calls at once, want at most 2", p["A"])
	}
}
