package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// concOverridesConfig is one queue whose tenants may each run 2 jobs at
// once, with submit and admin keys and no workers (the jobs stay in
// READY, where the test reads their stamps):
// fmt.Sprintf(concOverridesConfig, natsURL, redisAddr, webhookURL, apiKeysFile, adminKeysFile).
const concOverridesConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open}
http: {listen: "127.0.0.1:0", api_keys_file: "%[4]s", admin_keys_file: "%[5]s"}
queues:
  - name: conc
    limits: [{key: "header:X-Tenant", rate: 1000/s, burst: 1000}]
    backlog: {capacity: 1000, leak_rate: 1/s}
    concurrency:
      - {name: per-tenant, key: "header:X-Tenant", max: 2}
`

// TestConcurrencyOverridesAcrossAdmitters runs two admitter processes on
// one JetStream and one Redis. A runtime override of tenant-a's max set
// through admitter A is stamped by B on the jobs it admits within a
// second; the jobs B admitted before keep their stamp; its DELETE
// through B brings A back to the entry's max within a second; a submit
// key may not set one.
func TestConcurrencyOverridesAcrossAdmitters(t *testing.T) {
	keys := writeFile(t, "api-keys", e2eSubmitKey+"\n")
	admins := writeFile(t, "admin-keys", e2eAdminKey+"\n")
	c := afCluster(t, 2, 0, concOverridesConfig, keys, admins)
	client, nc := afClients(t, c)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tenantA := map[string]string{"X-Tenant": "tenant-a", "Authorization": "Bearer " + e2eSubmitKey}
	stampOf := func(n string) []string { return []string{"per-tenant:" + n + ":" + queue.KeyToken("tenant-a")} }
	// stamped submits one job of tenant-a to adm and reads the stamp it
	// was stored with in READY.
	stamped := func(adm string) (id string, stamp []string) {
		t.Helper()
		a := submitHTTP(t, client, adm, "conc", tenantA, []byte(`{}`))
		if a.Reply.Status != spillway.Admitted {
			t.Fatalf("a submission to %s: %d %+v, want admitted", adm, a.Code, a.Reply)
		}
		m, err := admittest.LastOfKey(t, js, "conc", queue.Ready, "tenant-a")
		if err != nil {
			t.Fatalf("the job %s in READY: %v", a.Reply.ID, err)
		}
		return a.Reply.ID, m.Header.Values(queue.HeaderConcurrencyKey)
	}
	keyURL := func(adm string) string {
		return "http://" + adm + "/v1/queues/conc/concurrency/per-tenant/keys/tenant-a"
	}

	admA, admB := c.admitters[0].addr, c.admitters[1].addr
	before, s := stamped(admB)
	if !slices.Equal(s, stampOf("2")) {
		t.Fatalf("tenant-a's job without an override: stamped %q, want %q", s, stampOf("2"))
	}
	if code, body := keyedCall(t, client, http.MethodPut, keyURL(admA), e2eSubmitKey, `{"max": 5}`); code != http.StatusForbidden {
		t.Errorf("PUT with a submit key: %d %s, want 403", code, body)
	}
	code, body := keyedCall(t, client, http.MethodPut, keyURL(admA), e2eAdminKey, `{"max": 5}`)
	if code != http.StatusOK {
		t.Fatalf("PUT through A: %d %s", code, body)
	}
	took := within(t, time.Second, "B stamping the new max", func() bool {
		_, s := stamped(admB)
		return slices.Equal(s, stampOf("5"))
	})
	t.Logf("the override set through A was stamped by B %v after PUT's answer", took.Round(time.Millisecond))

	// The job B admitted before the PUT keeps its max.
	st, err := js.Stream(t.Context(), queue.StreamName("conc", queue.Ready))
	if err != nil {
		t.Fatal(err)
	}
	kept := false
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("the job admitted before the PUT (%s) not found in READY: %v", before, err)
		}
		if m.Header.Get(spillway.HeaderJobID) == before {
			kept = slices.Equal(m.Header.Values(queue.HeaderConcurrencyKey), stampOf("2"))
			break
		}
	}
	if !kept {
		t.Errorf("the job admitted before the PUT changed its stamp; want it to keep max 2")
	}

	code, body = keyedCall(t, client, http.MethodGet, keyURL(admB), e2eAdminKey, "")
	var k spillway.KeyConcurrencyMax
	if code != http.StatusOK || json.Unmarshal(body, &k) != nil || k.Source != spillway.LimitSourceRuntime || k.Max != 5 || k.By == "" || k.At == nil {
		t.Errorf("GET through B: %d %s, want the runtime override with who set it and when", code, body)
	}
	if code, body := keyedCall(t, client, http.MethodDelete, keyURL(admB), e2eAdminKey, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE through B: %d %s", code, body)
	}
	took = within(t, time.Second, "A stamping the entry's max again", func() bool {
		_, s := stamped(admA)
		return slices.Equal(s, stampOf("2"))
	})
	t.Logf("the DELETE through B reached A's stamps %v after its answer", took.Round(time.Millisecond))
}
