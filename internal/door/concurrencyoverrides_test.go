package door_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const concurrencyOverridesConfig = `
queues:
  - name: mail
    limits: [{key: global, rate: 1000/s, burst: 1000}]
    backlog: {capacity: 100, leak_rate: 1/s}
    concurrency:
      - name: per-client
        key: "header:X-Client"
        max: 2
        overrides: [{key: "tenant-*", max: 5}]
      - {name: all, key: global, max: 50}
  - name: plain
    limits: [{key: global, rate: 1000/s, burst: 1000}]
    backlog: {capacity: 100, leak_rate: 1/s}
`

// TestConcurrencyEndpoints: the concurrency endpoints' status codes and
// JSON, problems naming what is wrong, and a runtime override set
// through PUT coming into force through the bucket's watch, GET saying
// where a key's max comes from; limit overrides in the same bucket do not
// mix with them.
func TestConcurrencyEndpoints(t *testing.T) {
	t.Parallel()
	b, call := overridesSetup(t, concurrencyOverridesConfig)
	keyPath := "/v1/queues/mail/concurrency/per-client/keys/"
	// Authentication, as every admin endpoint's.
	for _, c := range []struct {
		key  string
		code int
	}{{testKey, http.StatusForbidden}, {"", http.StatusUnauthorized}} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			if r := call(m, keyPath+"tenant-a", c.key, `{"max": 3}`); r.code != c.code {
				t.Errorf("%s with key %q: %d, want %d", m, c.key, r.code, c.code)
			}
		}
		if r := call(http.MethodGet, "/v1/queues/mail/concurrency", c.key, ""); r.code != c.code {
			t.Errorf("GET concurrency with key %q: %d, want %d", c.key, r.code, c.code)
		}
	}

	keyMax := func(path string) spillway.KeyConcurrencyMax {
		t.Helper()
		r := call(http.MethodGet, path, adminKey, "")
		var k spillway.KeyConcurrencyMax
		if r.code != http.StatusOK || json.Unmarshal(r.body, &k) != nil {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		return k
	}
	if k := keyMax(keyPath + "plain"); k.Source != "default" || k.Max != 2 || k.Pattern != "" || k.Concurrency != "per-client" || k.Queue != "mail" {
		t.Errorf("a key without an override: %+v", k)
	}
	if k := keyMax(keyPath + "tenant-b"); k.Source != "config" || k.Pattern != "tenant-*" || k.Max != 5 || k.Line != 10 {
		t.Errorf("a key of the config's prefix: %+v, want max 5 from line 10", k)
	}

	// Problems name what is wrong.
	for _, c := range []struct {
		method, path, body string
		code               int
		field, detail      string
	}{
		{http.MethodGet, "/v1/queues/nope/concurrency/per-client/keys/a", "", http.StatusNotFound, "", `no queue "nope"`},
		{http.MethodGet, "/v1/queues/nope/concurrency", "", http.StatusNotFound, "", `no queue "nope"`},
		{http.MethodGet, "/v1/queues/mail/concurrency/nope/keys/a", "", http.StatusNotFound, "", `no concurrency entry "nope": name one of ["per-client","all"]`},
		{http.MethodPut, "/v1/queues/plain/concurrency/per-client/keys/a", `{"max": 3}`, http.StatusNotFound, "", "queue plain has no concurrency entries"},
		{http.MethodPut, keyPath + "a", `{"max": 0}`, http.StatusBadRequest, "max", "want an integer from 1 to 10000"},
		{http.MethodPut, keyPath + "a", `{"max": 10001}`, http.StatusBadRequest, "max", "got 10001"},
		{http.MethodPut, keyPath + "a", `{"max": "many"}`, http.StatusBadRequest, "max", `got "many"`},
		{http.MethodPut, keyPath + "a", `{"max": 1.5}`, http.StatusBadRequest, "max", "got 1.5"},
		{http.MethodPut, keyPath + "a", `{}`, http.StatusBadRequest, "max", "max: missing"},
		{http.MethodPut, keyPath + "a", `{"max": 3, "rate": "1/s"}`, http.StatusBadRequest, "rate", `unknown field "rate"`},
		{http.MethodPut, keyPath + "a", `[3]`, http.StatusBadRequest, "", "want a JSON object"},
		{http.MethodPut, keyPath + "a*b", `{"max": 3}`, http.StatusBadRequest, "key", "'*'"},
		{http.MethodPut, "/v1/queues/mail/concurrency/all/keys/a", `{"max": 3}`, http.StatusBadRequest, "name", "global"},
		{http.MethodDelete, keyPath + "never-set", "", http.StatusNotFound, "", "no runtime override"},
		{http.MethodDelete, keyPath + "tenant-%2A", "", http.StatusNotFound, "", "line 10 of the configuration file stays"},
	} {
		r := call(c.method, c.path, adminKey, c.body)
		if r.code != c.code || r.problem.Field != c.field || !strings.Contains(r.problem.Detail, c.detail) {
			t.Errorf("%s %s %s: %d field %q (%s), want %d field %q and a detail with %q", c.method, c.path, c.body, r.code, r.problem.Field, r.body, c.code, c.field, c.detail)
		}
	}

	// A limit override in the same bucket is not a concurrency one.
	if r := call(http.MethodGet, "/v1/queues/mail/limits", adminKey, ""); r.code != http.StatusOK {
		t.Fatalf("GET limits: %d %s", r.code, r.body)
	}

	// PUT stores a runtime override, answered as GET will show it.
	r := call(http.MethodPut, keyPath+"tenant-a", adminKey, `{"max": 7}`)
	var set spillway.KeyConcurrencyMax
	if r.code != http.StatusOK || json.Unmarshal(r.body, &set) != nil || set.Source != "runtime" || set.Max != 7 ||
		set.By != door.KeyFingerprint(adminKey) || set.At == nil || set.Key != "tenant-a" || set.Pattern != "tenant-a" {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	if strings.Contains(string(r.body), adminKey) {
		t.Errorf("PUT's answer shows the admin key: %s", r.body)
	}
	waitFor(t, "the runtime override in force", func() bool { return keyMax(keyPath+"tenant-a").Source == "runtime" })
	if k := keyMax(keyPath + "tenant-a"); k.Max != 7 || k.By != set.By {
		t.Errorf("GET after PUT: %+v", k)
	}
	if got := b.admitter.Config().Queue("mail").Concurrency[0].MaxOf("tenant-a"); got != 7 {
		t.Errorf("the admitter's max of tenant-a after PUT: %d, want 7 (what it stamps)", got)
	}
	if k := keyMax(keyPath + "tenant-b"); k.Source != "config" || k.Max != 5 {
		t.Errorf("another key of the prefix after PUT: %+v", k)
	}
	// Setting it again replaces it.
	if r := call(http.MethodPut, keyPath+"tenant-a", adminKey, `{"max": 1}`); r.code != http.StatusOK {
		t.Fatalf("PUT again: %d %s", r.code, r.body)
	}
	waitFor(t, "the second PUT in force", func() bool { return keyMax(keyPath+"tenant-a").Max == 1 })

	// The list has both, by entry; the limits' list has none of them.
	r = call(http.MethodGet, "/v1/queues/mail/concurrency", adminKey, "")
	var list spillway.ConcurrencyList
	if r.code != http.StatusOK || json.Unmarshal(r.body, &list) != nil || list.Queue != "mail" || len(list.Entries) != 2 {
		t.Fatalf("GET concurrency: %d %s", r.code, r.body)
	}
	e := list.Entries[0]
	if e.Name != "per-client" || e.KeyedBy != "header:X-Client" || e.Max != 2 || len(e.Overrides) != 2 ||
		e.Overrides[0].Key != "tenant-*" || e.Overrides[0].Source != "config" || e.Overrides[0].Max != 5 || e.Overrides[0].Line != 10 ||
		e.Overrides[1].Key != "tenant-a" || e.Overrides[1].Source != "runtime" || e.Overrides[1].Max != 1 || e.Overrides[1].By == "" {
		t.Errorf("GET concurrency, entry 0: %+v", e)
	}
	if list.Entries[1].Overrides == nil || len(list.Entries[1].Overrides) != 0 {
		t.Errorf("GET concurrency, entry 1 has no overrides: %s", r.body)
	}
	var limits spillway.LimitList
	if r := call(http.MethodGet, "/v1/queues/mail/limits", adminKey, ""); json.Unmarshal(r.body, &limits) != nil || len(limits.Tiers[0].Overrides) != 0 {
		t.Errorf("GET limits after a concurrency override: %s, want no overrides", r.body)
	}
	r = call(http.MethodGet, "/v1/queues/plain/concurrency", adminKey, "")
	if r.code != http.StatusOK || !strings.Contains(string(r.body), `"entries":[]`) {
		t.Errorf("GET concurrency of a queue without entries: %d %s, want an empty list", r.code, r.body)
	}

	// DELETE removes it: the key is back on the config's prefix.
	if r := call(http.MethodDelete, keyPath+"tenant-a", adminKey, ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	waitFor(t, "the runtime override gone", func() bool { return keyMax(keyPath+"tenant-a").Source == "config" })
	if k := keyMax(keyPath + "tenant-a"); k.Max != 5 || k.Pattern != "tenant-*" {
		t.Errorf("tenant-a after DELETE: %+v, want the config's tenant-* (5)", k)
	}
}
