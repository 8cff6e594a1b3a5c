package config

import (
	"strings"
	"testing"
)

// TestConcurrency: a queue's concurrency entries, with their keys read as
// a tier's and their overrides resolved most specific first.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `queues:
  - name: q
    limits: [{key: global, rate: 10/s, burst: 20}]
    backlog: {leak_rate: 1/s}
    concurrency:
      - name: per-tenant
        key: "header:x-tenant"
        max: 2
        overrides:
          - {key: tenant-a, max: 10}
          - {key: "tenant-*", max: 5}
          - {key: "tenant-ab*", max: 7}
      - {name: all, key: global, max: 100}
`)
	cs := c.Queues[0].Concurrency
	if len(cs) != 2 || cs[0].Name != "per-tenant" || cs[0].Key.String() != "header:X-Tenant" || cs[1].Name != "all" || cs[1].Key.Kind != KeyGlobal || cs[1].Max != 100 {
		t.Fatalf("concurrency = %+v", cs)
	}
	for key, want := range map[string]int{"tenant-a": 10, "tenant-abc": 7, "tenant-b": 5, "other": 2} {
		if got := cs[0].MaxOf(key); got != want {
			t.Errorf("MaxOf(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestConcurrencyProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, entries string
		want          []string
	}{
		{"no name, key or max", `
      - {}`,
			[]string{
				`spillway.yaml:6: queues[0].concurrency[0].name: missing: expected a name of 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'`,
				`spillway.yaml:6: queues[0].concurrency[0].key: missing: expected "global", "ip" or "header:NAME"`,
				`spillway.yaml:6: queues[0].concurrency[0].max: missing: expected an integer from 1 to 10000: how many jobs of one key run at once`,
			}},
		{"a name twice", `
      - {name: a, key: ip, max: 1}
      - {name: a, key: ip, max: 2}`,
			[]string{`spillway.yaml:7: queues[0].concurrency[1].name: concurrency name "a" is already given at line 6`}},
		{"a dot in the name", `
      - {name: a.b, key: ip, max: 1}`,
			[]string{`spillway.yaml:6: queues[0].concurrency[0].name: expected a name of 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-', got "a.b"`}},
		{"max 0", `
      - {name: a, key: ip, max: 0}`,
			[]string{`spillway.yaml:6: queues[0].concurrency[0].max: expected an integer from 1 to 10000, got "0"`}},
		{"bad key", `
      - {name: a, key: "headers:X", max: 1}`,
			[]string{`spillway.yaml:6: queues[0].concurrency[0].key: expected "global", "ip" or "header:NAME", got "headers:X" (did you mean header:X?)`}},
		{"override of a global entry", `
      - {name: a, key: global, max: 1, overrides: [{key: x, max: 2}]}`,
			[]string{`spillway.yaml:6: queues[0].concurrency[0].overrides: a global entry has one key, which its own max bounds: overrides apply to header:NAME and ip entries`}},
		{"override problems", `
      - name: a
        key: ip
        max: 1
        overrides:
          - {key: "x*y", max: 2}
          - {key: b, max: 2}
          - {key: b, max: -1}`,
			[]string{
				`spillway.yaml:10: queues[0].concurrency[0].overrides[0].key: overrides: invalid key pattern "x*y": '*' at byte 1; a '*' may only end a prefix, such as tenant-*`,
				`spillway.yaml:12: queues[0].concurrency[0].overrides[2].key: key "b" is already overridden at line 11`,
				`spillway.yaml:12: queues[0].concurrency[0].overrides[2].max: expected an integer from 1 to 10000, got "-1"`,
			}},
		{"unknown field", `
      - {name: a, key: ip, max: 1, on_missing: shared}`,
			[]string{`spillway.yaml:6: queues[0].concurrency[0].on_missing: unknown field; expected one of name, key, max or overrides`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "queues:\n  - name: q\n    limits: [{key: global, rate: 10/s, burst: 20}]\n    backlog: {leak_rate: 1/s}\n    concurrency:" + tt.entries + "\n"
			got := problems(t, src)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
