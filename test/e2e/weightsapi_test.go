package e2e

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestWeightsFromTheAdminAPIReachWaitingJobs: as TestWeightsReachWaitingJobs,
// 300 + 300 due jobs of keys a and b wait in the backlog at leak 30/s,
// both of weight 1, under two admitters and two workers that all run one
// file, which never changes. A second into the drain an operator sends
// PUT /v1/queues/fair/weights/a {"weight": 3} to one admitter: from 3 s
// to 8 s after its answer a has at least 70 % of the starts, and the
// other admitter lists the rule. With SPILLWAY_E2E_WEIGHTS_API_CONTROL=1
// the PUT names key c, which has no jobs: a's share stays near 50 %, and
// the test fails, as it must (docs/design.md#fair-drain).
func TestWeightsFromTheAdminAPIReachWaitingJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("600 jobs drained for 9 s; -short skips it")
	}
	const leak = 30.0
	admins := writeFile(t, "admin-keys", e2eAdminKey+"\n")
	tmpl := strings.Replace(fdConfig, `http: {listen: "127.0.0.1:0"}`, `http: {listen: "127.0.0.1:0", admin_keys_file: "`+admins+`"}`, 1)
	if tmpl == fdConfig {
		t.Fatal("the fair drain's config has no http line to give admin keys to")
	}
	c := afCluster(t, 2, 0, tmpl, "30/s", "", fdRetry)
	r := &fdRun{t: t, c: c, leak: leak, jobs: map[string]fdJob{}, seqs: map[string]int{}}
	r.client, _ = afClients(t, c)
	if a := submitHTTP(t, r.client, c.admitters[0].addr, "fair", map[string]string{"X-Client": "warm-up"}, []byte(`{"warm_up":true}`)); a.Reply.Status != spillway.Admitted {
		t.Fatalf("the warm-up job: %d %+v, want admitted (it takes the global tier's one token)", a.Code, a.Reply)
	}
	r.fill("normal", 300, "a", "b")
	for i := range 2 {
		c.workers = append(c.workers, start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", c.config, "--metrics-listen", "127.0.0.1:0"))
	}
	backlogPullers(t, c.nats.URL(), c.config, "fair", 2)
	time.Sleep(time.Second) // the drain runs at weights 1/1

	call := func(adm *process, method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+adm.addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e2eAdminKey)
		resp, err := r.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	key := "a"
	if os.Getenv("SPILLWAY_E2E_WEIGHTS_API_CONTROL") == "1" {
		key = "c"
		t.Log("SPILLWAY_E2E_WEIGHTS_API_CONTROL=1: the PUT gives weight 3 to key c, which has no jobs")
	}
	if code, body := call(c.admitters[0], http.MethodPut, "/v1/queues/fair/weights/"+key, `{"weight":3}`); code != http.StatusOK {
		t.Fatalf("PUT weight 3 for %s on admitter 0: %d %s", key, code, body)
	}
	change := time.Now()
	from, to := change.Add(3*time.Second), change.Add(8*time.Second)

	code, body := call(c.admitters[1], http.MethodGet, "/v1/queues/fair/weights/"+key, "")
	var kw spillway.KeyWeight
	if code != http.StatusOK || json.Unmarshal(body, &kw) != nil || kw.Weight != 3 || kw.Source != spillway.WeightSourceRuntime {
		t.Errorf("GET weight of %s on admitter 1: %d %s, want 3 from the runtime rule", key, code, body)
	}
	if n := metric(t, c.admitters[0].addr, `spillway_weight_rule_changes_total{action="set",queue="fair"}`); n != 1 {
		t.Errorf("admitter 0: spillway_weight_rule_changes_total{action=\"set\",queue=\"fair\"} = %v, want 1", n)
	}
	time.Sleep(time.Until(to.Add(500 * time.Millisecond)))

	ss := r.starts(c.hook.snapshot())
	n, total := countIn(ss, from, to, func(s fdStartAt) string { return s.Key })
	share := 100 * float64(n["a"]) / math.Max(1, float64(total))
	figure(t, "PUT weights/%s {\"weight\":3} on one admitter of two a second into the drain of 300 + 300 waiting jobs at leak 30/s: 3–8 s after the change a had %.1f%% of the %d starts (a %d, b %d)",
		key, share, total, n["a"], n["b"])
	if share < 70 {
		t.Errorf("3–8 s after PUT weights/%s {\"weight\":3}, key a had %.1f%% of the %d starts, want ≥ 70%% (75%% at 3:1): the change did not reach the waiting jobs", key, share, total)
	}
	if done, _ := countIn(ss, time.Time{}, to, func(s fdStartAt) string { return s.Key }); done["a"] >= 300 || done["b"] >= 300 {
		t.Fatalf("a key's backlog ran dry before the measurement ended (%v started): the test measured no contention", done)
	}
	// Enough starts that the share means something. The leak's own rate
	// is held to its bounds by the leak tests; here, on a machine loaded
	// to 6 runnable threads a core, one run in 25 saw 134 starts (89 %).
	if total < int(5*leak)*3/4 {
		t.Errorf("%d starts in the 5 s measured, want at least %d of about %d (leak 30/s): too few to weigh shares by", total, int(5*leak)*3/4, int(5*leak))
	}
}
