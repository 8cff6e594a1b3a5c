package config

import (
	"strings"
	"testing"
)

// TestTierNameAndOnMissing: a tier's name defaults to tier<i>, a given
// one is kept; on_missing defaults to reject and takes shared.
func TestTierNameAndOnMissing(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `queues:
  - name: q
    limits:
      - {key: "header:X-Api-Key", rate: 10/s, name: per-key.second}
      - {key: "header:X-Api-Key", rate: 100/m, on_missing: shared}
      - {key: "header:X-Tenant", rate: 1/s, on_missing: reject, name: tier2}
      - {key: global, rate: 500/s}
    backlog: {leak_rate: 1/s}
`)
	type tier struct {
		name    string
		missing OnMissing
	}
	want := []tier{{"per-key.second", MissingReject}, {"tier1", MissingShared}, {"tier2", MissingReject}, {"tier3", MissingReject}}
	for i, l := range c.Queues[0].Limits {
		if got := (tier{l.Name, l.OnMissing}); got != want[i] {
			t.Errorf("limits[%d]: %+v, want %+v", i, got, want[i])
		}
	}
}

func TestTierNameAndOnMissingProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, limits string
		want         []string
	}{
		{"on_missing misspelt", `
      - {key: "header:X-A", rate: 1/s, on_missing: share}`,
			[]string{`spillway.yaml:4: queues[0].limits[0].on_missing: expected one of reject, shared, got "share" (did you mean shared?)`}},
		{"on_missing on a key without a header", `
      - {key: ip, rate: 1/s, on_missing: shared}`,
			[]string{`spillway.yaml:4: queues[0].limits[0].on_missing: applies to header:NAME keys only, not to ip`}},
		{"name with a quote", `
      - {key: global, rate: 1/s, name: 'a"b'}`,
			[]string{`spillway.yaml:4: queues[0].limits[0].name: expected a name of 1 to 64 characters from A-Z, a-z, 0-9, '_', '-' and '.', got "a\"b"`}},
		{"name with a space", `
      - {key: global, rate: 1/s, name: "per key"}`,
			[]string{`spillway.yaml:4: queues[0].limits[0].name: expected a name of 1 to 64 characters from A-Z, a-z, 0-9, '_', '-' and '.', got "per key"`}},
		{"name too long", `
      - {key: global, rate: 1/s, name: ` + strings.Repeat("n", 65) + `}`,
			[]string{`spillway.yaml:4: queues[0].limits[0].name: expected a name of 1 to 64 characters from A-Z, a-z, 0-9, '_', '-' and '.', got "` + strings.Repeat("n", 65) + `"`}},
		{"name twice", `
      - {key: global, rate: 1/s, name: burst}
      - {key: ip, rate: 1/s, name: burst}`,
			[]string{`spillway.yaml:5: queues[0].limits[1].name: tier name "burst" is already given at line 4`}},
		{"name of another tier's default", `
      - {key: global, rate: 1/s, name: tier1}
      - {key: ip, rate: 1/s}`,
			[]string{`spillway.yaml:4: queues[0].limits[0].name: tier name "tier1" is the default name of limits[1], which has no name; name that tier too, or choose another name`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "queues:\n  - name: q\n    limits:" + tt.limits + "\n    backlog: {leak_rate: 1/s}\n"
			got := problems(t, src)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestTierMode: a tier enforces unless it says mode: shadow.
func TestTierMode(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `queues:
  - name: q
    limits:
      - {key: "header:X-Api-Key", rate: 10/s}
      - {key: "header:X-Api-Key", rate: 100/m, mode: shadow, name: hourly}
      - {key: global, rate: 500/s, mode: enforce}
    backlog: {leak_rate: 1/s}
`)
	want := []Mode{ModeEnforce, ModeShadow, ModeEnforce}
	for i, l := range c.Queues[0].Limits {
		if l.Mode != want[i] || l.Shadow() != (want[i] == ModeShadow) {
			t.Errorf("limits[%d]: mode %q (shadow %t), want %q", i, l.Mode, l.Shadow(), want[i])
		}
	}
}

func TestTierModeProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, limits string
		want         []string
	}{
		{"mode misspelt", `
      - {key: global, rate: 1/s}
      - {key: "header:X-A", rate: 1/s, mode: shadwo}`,
			[]string{`spillway.yaml:5: queues[0].limits[1].mode: expected one of enforce, shadow, got "shadwo" (did you mean shadow?)`}},
		{"mode not a string", `
      - {key: global, rate: 1/s}
      - {key: "header:X-A", rate: 1/s, mode: [shadow]}`,
			[]string{`spillway.yaml:5: queues[0].limits[1].mode: expected a string, got a list`}},
		{"every tier in shadow", `
      - {key: global, rate: 1/s, mode: shadow}
      - {key: "header:X-A", rate: 1/s, mode: shadow}`,
			[]string{`spillway.yaml:4: queues[0].limits: every tier is mode: shadow; at least one must enforce (a queue admits through its enforcing tiers), such as {key: global, rate: "1000/s", burst: 1000}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "queues:\n  - name: q\n    limits:" + tt.limits + "\n    backlog: {leak_rate: 1/s}\n"
			got := problems(t, src)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
