package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// TestWorkerReloadsOnSIGHUP: SIGHUP makes a worker read its file again (as
// an admitter does), counted on its /metrics; it keeps working, and
// SIGTERM still stops it gracefully.
func TestWorkerReloadsOnSIGHUP(t *testing.T) {
	srv := queuetest.Start(t)
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(`
nats: {url: %q}
queues:
  - name: q
    limits: [{key: global, algorithm: leaky_bucket, rate: 10/s, burst: 10}]
    backlog: {capacity: 10, leak_rate: 1/s}
    handler: {log: true}
`, srv.URL()))
	w := start(t, "worker", bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0")
	w.signal(syscall.SIGHUP)
	client := apitest.Client(t, &http.Client{Timeout: 5 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	waitFor(t, 10*time.Second, "the reload on SIGHUP to be counted", func() bool {
		return metric(t, w.addr, `spillway_config_reloads_total{result="success"}`) >= 1
	})
	if b, _ := os.ReadFile(w.log); !strings.Contains(string(b), "configuration applied to the workers") {
		t.Error("the reload on SIGHUP was not logged")
	}
	select {
	case <-w.done:
		t.Fatalf("the worker exited on SIGHUP: %v", w.err)
	default:
	}
	resp, err := get(client, "http://"+w.addr+"/readyz")
	if err != nil {
		t.Fatalf("/readyz after SIGHUP: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz after SIGHUP: %d, want 200", resp.StatusCode)
	}
	if err := w.stop(15 * time.Second); err != nil {
		t.Errorf("SIGTERM after SIGHUP: %v", err)
	}
}
