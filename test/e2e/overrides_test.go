package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// overridesConfig is one queue limiting each tenant to one job an hour
// (a leaky bucket of burst 0), with submit and admin keys:
// fmt.Sprintf(overridesConfig, natsURL, redisAddr, webhookURL, apiKeysFile, adminKeysFile).
const overridesConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: closed, timeout: 1s}
http: {listen: "127.0.0.1:0", api_keys_file: "%[4]s", admin_keys_file: "%[5]s"}
queues:
  - name: tenants
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: leaky_bucket, rate: 1/h, burst: 0}
    backlog: {capacity: 1000, leak_rate: 1/s}
`

const e2eSubmitKey = "e2e-submit-0123456789abcdef"

// TestOverridesAcrossAdmitters runs two admitter processes on one
// JetStream and one Redis. A runtime override set through admitter A
// decides B's answers within a second; it is still in force after both
// restart (a new admitter has it before it answers); its DELETE through
// B lifts it on A within a second; a submit key may not set one.
func TestOverridesAcrossAdmitters(t *testing.T) {
	keys := writeFile(t, "api-keys", e2eSubmitKey+"\n")
	admins := writeFile(t, "admin-keys", e2eAdminKey+"\n")
	c := afCluster(t, 2, 0, overridesConfig, keys, admins)
	client, _ := afClients(t, c)
	tenantA := map[string]string{"X-Tenant": "tenant-a", "Authorization": "Bearer " + e2eSubmitKey}
	status := func(adm string) spillway.Status {
		t.Helper()
		a := submitHTTP(t, client, adm, "tenants", tenantA, []byte(`{}`))
		if a.Reply.Status != spillway.Admitted && a.Reply.Status != spillway.Rejected {
			t.Fatalf("a submission to %s: %d %+v, want admitted or rejected", adm, a.Code, a.Reply)
		}
		return a.Reply.Status
	}
	limitURL := func(adm string) string {
		return "http://" + adm + "/v1/queues/tenants/limits/per-tenant/keys/tenant-a"
	}

	admA, admB := c.admitters[0].addr, c.admitters[1].addr
	if s1, s2 := status(admB), status(admB); s1 != spillway.Admitted || s2 != spillway.Rejected {
		t.Fatalf("tenant-a without an override: %s then %s, want admitted then rejected", s1, s2)
	}
	if code, body := keyedCall(t, client, http.MethodPut, limitURL(admA), e2eSubmitKey, `{"rate": "1/h", "burst": 1000, "nodelay": true}`); code != http.StatusForbidden {
		t.Errorf("PUT with a submit key: %d %s, want 403", code, body)
	}
	code, body := keyedCall(t, client, http.MethodPut, limitURL(admA), e2eAdminKey, `{"rate": "1/h", "burst": 1000, "nodelay": true}`)
	if code != http.StatusOK {
		t.Fatalf("PUT through A: %d %s", code, body)
	}
	took := within(t, time.Second, "the override in force on B", func() bool { return status(admB) == spillway.Admitted })
	t.Logf("the override set through A decided B's answers %v after PUT's answer", took.Round(time.Millisecond))

	for i, p := range c.admitters {
		if err := p.stop(15 * time.Second); err != nil {
			t.Fatalf("stopping admitter %d: %v", i, err)
		}
	}
	admA = start(t, "admitter0-again", bins.admitter, "--config", c.config).addr
	admB = start(t, "admitter1-again", bins.admitter, "--config", c.config).addr
	// Ready means the overrides are loaded: no wait.
	for _, adm := range []string{admA, admB} {
		if s := status(adm); s != spillway.Admitted {
			t.Errorf("tenant-a on %s after the restart: %s, want admitted (the override in force)", adm, s)
		}
	}
	code, body = keyedCall(t, client, http.MethodGet, limitURL(admA), e2eAdminKey, "")
	var k spillway.KeyLimit
	if code != http.StatusOK || json.Unmarshal(body, &k) != nil || k.Source != spillway.LimitSourceRuntime || k.Burst != 1000 || k.By == "" || k.At == nil {
		t.Errorf("GET after the restart: %d %s, want the runtime override with who set it and when", code, body)
	}

	if code, body := keyedCall(t, client, http.MethodDelete, limitURL(admB), e2eAdminKey, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE through B: %d %s", code, body)
	}
	took = within(t, time.Second, "the override gone on A", func() bool { return status(admA) == spillway.Rejected })
	t.Logf("the DELETE through B lifted the override on A %v after its answer", took.Round(time.Millisecond))
}

// keyedCall sends method url with body and Authorization: Bearer key
// through client: the answer's status and body.
func keyedCall(t *testing.T, client *http.Client, method, url, key, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// within polls cond every 20 ms until it holds, failing t after d: how
// long it took.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
