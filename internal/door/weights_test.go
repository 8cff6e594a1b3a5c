package door_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const weightsConfig = `
queues:
  - name: mail
    limits:
      - {key: "header:X-Client", rate: 10/s, burst: 20}
    backlog: {capacity: 100, leak_rate: 1/s, fairness: {weights: {"tenant-*": 2, vip: 5}}}
`

// TestWeightsEndpoints: the weights endpoints' authentication, status
// codes, problems and JSON; a runtime rule replacing the file's rule of
// its pattern, the most specific rule of the union winning, and a delete
// falling back to the file's rule.
func TestWeightsEndpoints(t *testing.T) {
	t.Parallel()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	admins, err := door.LoadAPIKeys(writeFile(t, "admin-keys", adminKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, weightsConfig, setupOptions{keys: keys, adminKeys: admins})
	call := func(method, path, key, body string) response {
		t.Helper()
		var h []string
		if key != "" {
			h = []string{"Authorization", "Bearer " + key}
		}
		return b.do(t, method, path, strings.NewReader(body), h...)
	}
	const base = "/v1/queues/mail/weights"
	// Authentication, as every admin endpoint's.
	for _, c := range []struct {
		key  string
		code int
	}{{testKey, http.StatusForbidden}, {"", http.StatusUnauthorized}, {"not-a-key", http.StatusUnauthorized}} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			if r := call(m, base+"/tenant-a", c.key, `{"weight":2}`); r.code != c.code {
				t.Errorf("%s with key %q: %d, want %d", m, c.key, r.code, c.code)
			}
		}
		if r := call(http.MethodGet, base, c.key, ""); r.code != c.code {
			t.Errorf("GET weights with key %q: %d, want %d", c.key, r.code, c.code)
		}
	}
	// An unknown queue.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		r := call(m, "/v1/queues/nope/weights/a", adminKey, `{"weight":2}`)
		if p := problemOf(t, r); r.code != http.StatusNotFound || p.Type != spillway.ProblemNotFound || !strings.Contains(p.Detail, "nope") {
			t.Errorf("%s of an unknown queue: %d %s, want 404 naming it", m, r.code, r.body)
		}
	}
	if r := call(http.MethodGet, "/v1/queues/nope/weights", adminKey, ""); r.code != http.StatusNotFound {
		t.Errorf("GET weights of an unknown queue: %d, want 404", r.code)
	}
	// Bad bodies and keys, each a problem naming the field.
	for _, c := range []struct {
		path, body, field, detail string
	}{
		{base + "/a", `{}`, "weight", "missing"},
		{base + "/a", `{"weight":0}`, "weight", "1 to 1000"},
		{base + "/a", `{"weight":1001}`, "weight", "1 to 1000"},
		{base + "/a", `{"weight":2.5}`, "weight", "integer"},
		{base + "/a", `{"weight":"3"}`, "weight", "integer"},
		{base + "/a", `{"weight":null}`, "weight", "integer"},
		{base + "/a", `{"weight":3,"rate":"1/s"}`, "rate", "unknown field"},
		{base + "/a", `[3]`, "", "JSON object"},
		{base + "/a", ``, "", "JSON object"},
		{base + "/" + strings.Repeat("k", 1025), `{"weight":3}`, "key", "at most 1024"},
	} {
		r := call(http.MethodPut, c.path, adminKey, c.body)
		p := problemOf(t, r)
		if r.code != http.StatusBadRequest || p.Field != c.field || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("PUT %.40s %s: %d %s, want 400 field %q saying %q", c.path, c.body, r.code, r.body, c.field, c.detail)
		}
	}

	list := func() map[string][]spillway.WeightRule {
		t.Helper()
		r := call(http.MethodGet, base, adminKey, "")
		var l spillway.WeightList
		if r.code != http.StatusOK || json.Unmarshal(r.body, &l) != nil || l.Queue != "mail" {
			t.Fatalf("GET %s: %d %s", base, r.code, r.body)
		}
		out := map[string][]spillway.WeightRule{}
		for _, w := range l.Rules {
			out[w.Key] = append(out[w.Key], w)
		}
		return out
	}
	weightOf := func(key string) spillway.KeyWeight {
		t.Helper()
		r := call(http.MethodGet, base+"/"+key, adminKey, "")
		var k spillway.KeyWeight
		if r.code != http.StatusOK || json.Unmarshal(r.body, &k) != nil {
			t.Fatalf("GET weight of %s: %d %s", key, r.code, r.body)
		}
		return k
	}
	expect := func(key string, weight int, pattern, source string) {
		t.Helper()
		if k := weightOf(key); k.Weight != weight || k.Pattern != pattern || k.Source != source || k.Key != key || k.Queue != "mail" {
			t.Errorf("weight of %s: %+v, want %d from %s rule %q", key, k, weight, source, pattern)
		}
	}
	// The file's rules alone.
	if l := list(); len(l) != 2 || len(l["tenant-*"]) != 1 || !l["tenant-*"][0].InForce || l["vip"][0].Weight != 5 {
		t.Errorf("the file's rules: %+v", l)
	}
	expect("tenant-a", 2, "tenant-*", spillway.WeightSourceConfig)
	expect("vip", 5, "vip", spillway.WeightSourceConfig)
	expect("other", 1, "", spillway.WeightSourceDefault)

	put := func(pattern string, weight int) spillway.KeyWeight {
		t.Helper()
		r := call(http.MethodPut, base+"/"+pattern, adminKey, `{"weight":`+itoa(weight)+`}`)
		var k spillway.KeyWeight
		if r.code != http.StatusOK || json.Unmarshal(r.body, &k) != nil {
			t.Fatalf("PUT %s: %d %s", pattern, r.code, r.body)
		}
		return k
	}
	if k := put("tenant-*", 4); k.Key != "tenant-*" || k.Weight != 4 || k.Source != spillway.WeightSourceRuntime || k.By != door.KeyFingerprint(adminKey) || k.At == nil {
		t.Errorf("PUT tenant-*: %+v", k)
	}
	put("*", 7)
	put("tenant-vip", 9)
	expect("tenant-a", 4, "tenant-*", spillway.WeightSourceRuntime)     // runtime replaces the file's rule
	expect("tenant-vip", 9, "tenant-vip", spillway.WeightSourceRuntime) // exact over prefix
	expect("vip", 5, "vip", spillway.WeightSourceConfig)                // the file's exact over runtime's *
	expect("other", 7, "*", spillway.WeightSourceRuntime)               // * last
	l := list()
	for _, w := range l["tenant-*"] {
		if w.InForce != (w.Source == spillway.WeightSourceRuntime) {
			t.Errorf("tenant-* from %s: in force %v; want the runtime rule in force, the file's not", w.Source, w.InForce)
		}
	}
	if len(l["tenant-*"]) != 2 || len(l["*"]) != 1 || len(l["tenant-vip"]) != 1 || l["*"][0].By == "" {
		t.Errorf("after three PUTs: %+v", l)
	}

	// DELETE: the runtime rule goes, the file's comes back; a second
	// DELETE, or one of a file rule, is 404 saying so.
	if r := call(http.MethodDelete, base+"/tenant-*", adminKey, ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE tenant-*: %d %s", r.code, r.body)
	}
	expect("tenant-a", 2, "tenant-*", spillway.WeightSourceConfig)
	r := call(http.MethodDelete, base+"/tenant-*", adminKey, "")
	if p := problemOf(t, r); r.code != http.StatusNotFound || !strings.Contains(p.Detail, "configuration file") {
		t.Errorf("DELETE tenant-* again: %d %s, want 404 saying the file's rule stays", r.code, r.body)
	}
	for _, p := range []string{"*", "tenant-vip"} {
		if r := call(http.MethodDelete, base+"/"+p, adminKey, ""); r.code != http.StatusNoContent {
			t.Fatalf("DELETE %s: %d %s", p, r.code, r.body)
		}
	}
	if l := list(); len(l) != 2 {
		t.Errorf("every runtime rule removed: %+v, want the file's two", l)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func problemOf(t *testing.T, r response) spillway.Problem {
	t.Helper()
	var p spillway.Problem
	_ = json.Unmarshal(r.body, &p)
	return p
}
