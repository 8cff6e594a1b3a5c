package config

import (
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/overrides"
)

// TestTierOverrides: a tier's overrides, exact and prefix, take the
// tier's algorithm with their own parameters, and resolve most specific
// first.
func TestTierOverrides(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `queues:
  - name: q
    limits:
      - key: "header:X-Tenant"
        algorithm: token_bucket
        rate: 10/s
        burst: 20
        overrides:
          - {key: tenant-a, rate: 100/s, burst: 200}
          - {key: "tenant-*", rate: 50/s, burst: 50}
          - {key: "tenant-ab*", rate: 70/s, burst: 70}
      - key: ip
        algorithm: fixed_window
        limit: 1000
        window: 1m
        overrides: [{key: "*", limit: 5, window: 1s}]
    backlog: {leak_rate: 1/s}
`)
	l := c.Queues[0].Limits[0]
	if n := l.Overrides.Len(); n != 3 {
		t.Fatalf("tier 0 has %d overrides, want 3", n)
	}
	for _, tt := range []struct{ key, want string }{
		{"tenant-a", "token_bucket rate=100/s burst=200"},
		{"tenant-abc", "token_bucket rate=70/s burst=70"},
		{"tenant-b", "token_bucket rate=50/s burst=50"},
		{"other", ""},
	} {
		o := l.Overrides.Match(tt.key)
		got := ""
		if o != nil {
			got = o.Limit.String()
			if o.Source != overrides.SourceConfig || o.Line == 0 {
				t.Errorf("%s: source %s line %d, want config and its line", tt.key, o.Source, o.Line)
			}
		}
		if got != tt.want {
			t.Errorf("%s: %q, want %q", tt.key, got, tt.want)
		}
	}
	if o := c.Queues[0].Limits[1].Overrides.Match("anything"); o == nil || o.Limit.String() != "fixed_window limit=5 window=1s" {
		t.Errorf("tier 1's * override: %+v", o)
	}
}

func TestTierOverridesProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, overrides string
		want            []string
	}{
		{"no key", `
          - {rate: 1/s, burst: 2}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides[0].key: missing: expected a client key such as "tenant-a", or a prefix such as "tenant-*"`}},
		{"star inside", `
          - {key: "ten*ant", rate: 1/s, burst: 2}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides[0].key: overrides: invalid key pattern "ten*ant": '*' at byte 3; a '*' may only end a prefix, such as tenant-*`}},
		{"a key twice", `
          - {key: a, rate: 1/s, burst: 2}
          - {key: a, rate: 2/s, burst: 2}`,
			[]string{`spillway.yaml:10: queues[0].limits[0].overrides[1].key: key "a" is already overridden at line 9`}},
		{"bad rate", `
          - {key: a, rate: 1/x, burst: 2}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides[0].rate: expected a rate such as "10/s", got "1/x"`}},
		{"a parameter of another algorithm", `
          - {key: a, rate: 1/s, burst: 2, window: 1s}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides[0].window: token_bucket takes rate and burst, not limit and window, got 1s`}},
		{"burst the algorithm refuses", `
          - {key: a, rate: 1/s, burst: 0}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides[0].burst: a token bucket's capacity must be ≥ 1, got 0`}},
		{"unknown field", `
          - {key: a, rate: 1/s, burst: 1, algorithm: leaky_bucket}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides[0].algorithm: unknown field; expected one of key, rate, burst, delay, nodelay, limit or window`}},
		{"a global tier", `
          - {key: a, rate: 1/s, burst: 2}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides: a global tier has one key, which its own parameters limit: overrides apply to header:NAME and ip tiers`}},
		{"not a list", `
          {key: a}`,
			[]string{`spillway.yaml:9: queues[0].limits[0].overrides: expected a list of overrides, got a mapping`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "queues:\n  - name: q\n    limits:\n      - key: \"header:X-Tenant\"\n        algorithm: token_bucket\n        rate: 10/s\n        burst: 20\n        overrides:" +
				tt.overrides + "\n    backlog: {leak_rate: 1/s}\n"
			if tt.name == "a global tier" {
				src = strings.Replace(src, `"header:X-Tenant"`, "global", 1)
			}
			got := problems(t, src)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
