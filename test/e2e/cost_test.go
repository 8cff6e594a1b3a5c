package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestCostSettledFromTheAnswer: a token bucket of burst 100 admits a job
// of cost 100; its handler answers Spillway-Cost-Actual: 10; a job of cost
// 80 submitted once the first one's outcome is recorded is admitted at
// once — the 90 units the first job did not use were given back. With the
// memory store (the settle goes to the admitter that decided) and with
// Redis (any admitter settles), an admitter and a worker as processes.
func TestCostSettledFromTheAnswer(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			js := queuetest.Start(t)
			redis := ""
			if store == "redis" {
				redis = fmt.Sprintf("redis: {url: \"redis://%s/0\", failure_mode: closed, timeout: 1s}\n", redistest.Start(t, redistest.WithOwnProcess()).Addr())
			}
			// The downstream: records each job and answers the actual cost
			// the test set for its payload (none: no header).
			var (
				mu     sync.Mutex
				actual = map[string]string{}
				hits   = map[string]int{}
			)
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				id := r.Header.Get(spillway.HeaderJobID)
				mu.Lock()
				hits[id]++
				a := actual[string(body)]
				mu.Unlock()
				if a != "" {
					w.Header().Set(spillway.HeaderCostActual, a)
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(hook.Close)
			mu.Lock()
			actual["first"] = "10"
			mu.Unlock()
			cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(`
nats: {url: "%s"}
%shttp: {listen: "127.0.0.1:0"}
queues:
  - name: cost
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 100}
    backlog: {capacity: 10, leak_rate: 1/s}
    handler: {http: {url: "%s/cost", timeout: 5s}}
`, js.URL(), redis, hook.URL))
			adm := start(t, "admitter", bins.admitter, "--config", cfg)
			start(t, "worker", bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0")
			client := &http.Client{Timeout: 10 * time.Second}

			first := submitHTTP(t, client, adm.addr, "cost", map[string]string{"X-Client": "c", spillway.HeaderCost: "100"}, []byte("first"))
			if first.Reply.Status != spillway.Admitted {
				t.Fatalf("the job of cost 100: %+v, want admitted", first)
			}
			waitFor(t, 20*time.Second, "the first job's outcome", func() bool {
				resp, err := get(client, "http://"+adm.addr+"/v1/jobs/"+first.Reply.ID)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var rec struct{ State string }
				return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&rec) == nil && rec.State == "succeeded"
			})
			second := submitHTTP(t, client, adm.addr, "cost", map[string]string{"X-Client": "c", spillway.HeaderCost: "80"}, []byte("second"))
			if second.Reply.Status != spillway.Admitted {
				t.Fatalf("the job of cost 80 after the first was settled at 10: %+v, want admitted at once", second)
			}
			// The admitter counted the 90 units it gave back.
			if got := metric(t, adm.addr, `spillway_cost_settled_units_total{direction="refunded",queue="cost"}`); got != 90 {
				t.Errorf("spillway_cost_settled_units_total refunded = %v, want 90", got)
			}
			// Nothing lost: both jobs reached the downstream.
			waitFor(t, 20*time.Second, "the second job to run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return hits[second.Reply.ID] > 0
			})
			mu.Lock()
			defer mu.Unlock()
			if hits[first.Reply.ID] != 1 {
				t.Errorf("the first job ran %d times, want once", hits[first.Reply.ID])
			}
		})
	}
}
