package yamlpos

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// TestParse pins the line of each kind of problem: yaml.v3 counts lines
// from 0 in parser errors, from 1 in scanner errors, and names an unknown
// anchor without a line.
func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      Problem
	}{
		{"scanner error", "x: 1\na: b: c\n", Problem{2, "invalid YAML: mapping values are not allowed in this context"}},
		{"scanner error on line 1", "a: b: c\n", Problem{1, "invalid YAML: mapping values are not allowed in this context"}},
		{"parser error", "x: 1\ny: 2\nz: [abc\n", Problem{3, "invalid YAML: did not find expected ',' or ']'"}},
		{"parser error in a block", "x: 1\nqueues:\n  - a\n  b: 1\n", Problem{3, "invalid YAML: did not find expected '-' indicator"}},
		{"unknown anchor", "x: 1\nqueues: *nope\n", Problem{2, "invalid YAML: unknown anchor 'nope' referenced"}},
		{"tab", "queues:\n\t- a\n", Problem{2, "invalid YAML: found character that cannot start any token"}},
		{"invalid UTF-8", "x: 1\ny: \xff\n", Problem{2, "invalid UTF-8 (byte 0xff); the file must be UTF-8 text"}},
		{"control character", "x: 1\n\ny: \x01\n", Problem{3, "control character U+0001 is not allowed in YAML"}},
		{"two documents", "x: 1\n---\ny: 2\n", Problem{3, `expected one YAML document, found a second one (a line "---" starts a new document)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, p := Parse([]byte(tt.src)); p == nil || *p != tt.want {
				t.Errorf("Parse(%q) = %v, want %v", tt.src, p, tt.want)
			}
		})
	}
	for _, src := range []string{"", "# only a comment\n"} {
		if root, p := Parse([]byte(src)); root != nil || p != nil {
			t.Errorf("Parse(%q) = %v, %v; want nothing", src, root, p)
		}
	}
	if root, p := Parse([]byte("a: 1\n")); p != nil || root.Kind != yaml.MappingNode {
		t.Errorf("Parse: %v, %v; want the mapping", root, p)
	}
}

// TestLastLine counts the line breaks YAML knows, and a last line without
// one.
func TestLastLine(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]int{"": 1, "a": 1, "a\n": 1, "a\nb": 2, "a\r\nb\r\n": 2, "a\rb": 2, "a\u2028b\u2029": 2, "a\u0085b": 2} {
		if got := LastLine([]byte(src)); got != want {
			t.Errorf("LastLine(%q) = %d, want %d", src, got, want)
		}
	}
}

// TestLookup reads a key through merge keys, a mapping's own first.
func TestLookup(t *testing.T) {
	t.Parallel()
	root, p := Parse([]byte("base: &b {x: 1, y: 2}\nm: {<<: [*b], y: 3}\n"))
	if p != nil {
		t.Fatal(p)
	}
	m := Lookup(root, "m")
	for key, want := range map[string]string{"x": `"1"`, "y": `"3"`, "z": "nothing"} {
		if got := Describe(Deref(Lookup(m, key))); got != want {
			t.Errorf("Lookup(m, %q) = %s, want %s", key, got, want)
		}
	}
}

// TestInt reads integers as YAML writes them, and as plain text.
func TestInt(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]int64{"1_000": 1000, "0x10": 16, `"10"`: 10, "-3": -3} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(src), &n); err != nil {
			t.Fatal(err)
		}
		if got, err := Int(n.Content[0]); err != nil || got != want {
			t.Errorf("Int(%s) = %d, %v; want %d", src, got, err, want)
		}
	}
	for _, src := range []string{"1.5", "true", `"ten"`} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(src), &n); err != nil {
			t.Fatal(err)
		}
		if got, err := Int(n.Content[0]); err == nil {
			t.Errorf("Int(%s) = %d, want an error", src, got)
		}
	}
}
