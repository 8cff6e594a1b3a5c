package door_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const limitsConfig = `
queues:
  - name: mail
    limits:
      - key: "header:X-Client"
        algorithm: token_bucket
        rate: 10/s
        burst: 20
        name: per-client
        overrides: [{key: "tenant-*", rate: 50/s, burst: 50}]
      - {key: global, rate: 1000/s, burst: 1000}
    backlog: {capacity: 100, leak_rate: 1/s}
`

// TestLimitsEndpoints: the limits endpoints' status codes and JSON, and
// a runtime override set through PUT coming into force through the
// bucket's watch, GET saying where a key's limit comes from.
func TestLimitsEndpoints(t *testing.T) {
	t.Parallel()
	_, call := overridesSetup(t, limitsConfig)
	keyPath := "/v1/queues/mail/limits/per-client/keys/"
	// Authentication, as every admin endpoint's.
	for _, c := range []struct {
		key  string
		code int
	}{{testKey, http.StatusForbidden}, {"", http.StatusUnauthorized}} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			if r := call(m, keyPath+"tenant-a", c.key, `{"rate":"1/s","burst":1}`); r.code != c.code {
				t.Errorf("%s with key %q: %d, want %d", m, c.key, r.code, c.code)
			}
		}
		if r := call(http.MethodGet, "/v1/queues/mail/limits", c.key, ""); r.code != c.code {
			t.Errorf("GET limits with key %q: %d, want %d", c.key, r.code, c.code)
		}
	}

	keyLimit := func(path string) spillway.KeyLimit {
		t.Helper()
		r := call(http.MethodGet, path, adminKey, "")
		var k spillway.KeyLimit
		if r.code != http.StatusOK || json.Unmarshal(r.body, &k) != nil {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		return k
	}
	if k := keyLimit(keyPath + "plain"); k.Source != "default" || k.Rate != "10/s" || k.Burst != 20 || k.Algorithm != "token_bucket" || k.Pattern != "" {
		t.Errorf("a key without an override: %+v", k)
	}
	if k := keyLimit("/v1/queues/mail/limits/0/keys/tenant-b"); k.Source != "config" || k.Pattern != "tenant-*" || k.Burst != 50 || k.Line == 0 || k.Tier != "per-client" {
		t.Errorf("a key of the config's prefix, its tier by index: %+v", k)
	}

	// Problems name what is wrong.
	for _, c := range []struct {
		method, path, body string
		code               int
		field              string
	}{
		{http.MethodGet, "/v1/queues/nope/limits/0/keys/a", "", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/queues/mail/limits/nope/keys/a", "", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/queues/mail/limits/7/keys/a", "", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/queues/nope/limits", "", http.StatusNotFound, ""},
		{http.MethodPut, keyPath + "a", `{"rate":"1/x","burst":1}`, http.StatusBadRequest, "rate"},
		{http.MethodPut, keyPath + "a", `{"rate":"1/s","burst":0}`, http.StatusBadRequest, "burst"},
		{http.MethodPut, keyPath + "a", `{"rate":"1/s","burst":"many"}`, http.StatusBadRequest, "burst"},
		{http.MethodPut, keyPath + "a", `{"rate":"1/s","burst":1,"algorithm":"fixed_window"}`, http.StatusBadRequest, "algorithm"},
		{http.MethodPut, keyPath + "a", `{"limit":5,"window":"1s"}`, http.StatusBadRequest, "rate"},
		{http.MethodPut, keyPath + "a", `[1]`, http.StatusBadRequest, ""},
		{http.MethodPut, keyPath + "a*b", `{"rate":"1/s","burst":1}`, http.StatusBadRequest, "key"},
		{http.MethodPut, "/v1/queues/mail/limits/1/keys/a", `{"rate":"1/s","burst":1}`, http.StatusBadRequest, "tier"},
		{http.MethodDelete, keyPath + "never-set", "", http.StatusNotFound, ""},
		{http.MethodDelete, keyPath + "tenant-%2A", "", http.StatusNotFound, ""},
	} {
		r := call(c.method, c.path, adminKey, c.body)
		if strings.HasSuffix(c.path, "%2A") && !strings.Contains(r.problem.Detail, "line 10 of the configuration file") {
			t.Errorf("DELETE of the config's prefix: %s, want the detail to say the file's override stays", r.body)
		}
		if r.code != c.code || r.problem.Field != c.field || r.problem.Detail == "" {
			t.Errorf("%s %s %s: %d field %q (%s), want %d field %q", c.method, c.path, c.body, r.code, r.problem.Field, r.body, c.code, c.field)
		}
	}

	// PUT stores a runtime override, answered as GET will show it.
	r := call(http.MethodPut, keyPath+"tenant-a", adminKey, `{"rate": "100/s", "burst": 200}`)
	var set spillway.KeyLimit
	if r.code != http.StatusOK || json.Unmarshal(r.body, &set) != nil || set.Source != "runtime" || set.Burst != 200 ||
		set.By != door.KeyFingerprint(adminKey) || set.At == nil || set.Key != "tenant-a" {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	if strings.Contains(string(r.body), adminKey) {
		t.Errorf("PUT's answer shows the admin key: %s", r.body)
	}
	waitFor(t, "the runtime override in force", func() bool { return keyLimit(keyPath+"tenant-a").Source == "runtime" })
	if k := keyLimit(keyPath + "tenant-a"); k.Rate != "100/s" || k.Burst != 200 || k.Pattern != "tenant-a" || k.By != set.By {
		t.Errorf("GET after PUT: %+v", k)
	}
	if k := keyLimit(keyPath + "tenant-b"); k.Source != "config" {
		t.Errorf("another key of the prefix after PUT: %+v", k)
	}

	// The list has both, by tier.
	r = call(http.MethodGet, "/v1/queues/mail/limits", adminKey, "")
	var list spillway.LimitList
	if r.code != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Tiers) != 2 {
		t.Fatalf("GET limits: %d %s", r.code, r.body)
	}
	tier := list.Tiers[0]
	if tier.Tier != "per-client" || tier.KeyedBy != "header:X-Client" || tier.Burst != 20 || len(tier.Overrides) != 2 ||
		tier.Overrides[0].Key != "tenant-*" || tier.Overrides[0].Source != "config" ||
		tier.Overrides[1].Key != "tenant-a" || tier.Overrides[1].Source != "runtime" || tier.Overrides[1].By == "" {
		t.Errorf("GET limits, tier 0: %+v", tier)
	}
	if list.Tiers[1].Overrides == nil || len(list.Tiers[1].Overrides) != 0 {
		t.Errorf("GET limits, tier 1 has no overrides: %s", r.body)
	}

	// DELETE removes it: the key is back on the config's prefix.
	if r := call(http.MethodDelete, keyPath+"tenant-a", adminKey, ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	waitFor(t, "the runtime override gone", func() bool { return keyLimit(keyPath+"tenant-a").Source == "config" })
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// overridesSetup starts an admitter of yaml with a submit key (testKey)
// and an admin key (adminKey), following the runtime overrides' bucket as
// admitterd does; call sends one request with key (none if empty).
func overridesSetup(t *testing.T, yaml string) (b *testBundle, call func(method, path, key, body string) response) {
	t.Helper()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	admins, err := door.LoadAPIKeys(writeFile(t, "admin-keys", adminKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b = setup(t, yaml, setupOptions{keys: keys, adminKeys: admins})
	w := overrides.NewWatcher(b.limits, nil)
	w.OnChange = b.admitter.SetRuntimeOverrides
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b, func(method, path, key, body string) response {
		t.Helper()
		var h []string
		if key != "" {
			h = []string{"Authorization", "Bearer " + key}
		}
		return b.do(t, method, path, strings.NewReader(body), h...)
	}
}
