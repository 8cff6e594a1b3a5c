package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// TestKeyConcurrencyNoHeadOfLineBlocking: one worker process of
// concurrency 4, tenant A may run 2 jobs at once. 30 jobs of A, each held
// 300 ms by the webhook (4.5 s of A's work), then 2 of B: far more of A's
// jobs are in READY than the worker may hold waiting (4), yet B's jobs
// start within 1 s of their submission, not behind A's; never more than 2
// of A at once; every job runs exactly once.
func TestKeyConcurrencyNoHeadOfLineBlocking(t *testing.T) {
	hook := newConcHook(t, 300*time.Millisecond)
	ns, rs := queuetest.Start(t), redistest.Start(t, redistest.WithOwnProcess())
	cfg := strings.Replace(concConfig, "worker: {ack_wait: 3s, grace_period: 5s}", "worker: {concurrency: 4, ack_wait: 3s, grace_period: 5s}", 1)
	if !strings.Contains(cfg, "concurrency: 4") {
		t.Fatalf("the test's config was not rewritten:\n%s", cfg)
	}
	adm := start(t, "admitter", bins.admitter, "--config", writeFile(t, "admitter.yaml", fmt.Sprintf(cfg, ns.URL(), rs.Addr(), hook.srv.URL+"/admitter")))
	start(t, "w0", bins.worker, "--config", writeFile(t, "w0.yaml", fmt.Sprintf(cfg, ns.URL(), rs.Addr(), hook.srv.URL+"/w0")), "--metrics-listen", "127.0.0.1:0")
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)

	ids := map[string]string{} // id → tenant
	for range 30 {
		ids[concSubmit(t, client, adm.addr, "A")] = "A"
	}
	submittedB := time.Now()
	for range 2 {
		ids[concSubmit(t, client, adm.addr, "B")] = "B"
	}
	waitFor(t, 60*time.Second, "32 jobs answered by the webhook", func() bool {
		done := 0
		for _, c := range hook.snapshot() {
			if !c.end.IsZero() && c.status == http.StatusOK {
				done++
			}
		}
		return done >= 32
	})
	calls := hook.snapshot()
	ran := map[string]int{}
	var lastB time.Time
	aBefore := 0 // A's calls answered before B's last started
	for _, c := range calls {
		ran[c.id]++
		if c.tenant == "B" && c.start.After(lastB) {
			lastB = c.start
		}
	}
	for _, c := range calls {
		if c.tenant == "A" && c.end.Before(lastB) {
			aBefore++
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
	if p := hook.peaks(); p["A"] > 2 {
		t.Errorf("peak calls of A at once %d, want at most 2", p["A"])
	}
	if wait := lastB.Sub(submittedB); wait > time.Second {
		t.Errorf("B's jobs started %v after their submission (%d of A's 30 answered by then), want ≤ 1s", wait, aBefore)
	} else {
		t.Logf("B's jobs started %v after their submission, %d of A's 30 answered by then", wait.Round(time.Millisecond), aBefore)
	}
}
