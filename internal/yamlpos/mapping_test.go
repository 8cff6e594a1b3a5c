package yamlpos

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestMappingProblems finds a key given twice, a merge of a scalar and a
// mapping that merges itself, each at its node.
func TestMappingProblems(t *testing.T) {
	t.Parallel()
	root, p := Parse([]byte("a: 1\nb: 2\na: 3\n<<: x\nm: &m {<<: *m}\n"))
	if p != nil {
		t.Fatal(p)
	}
	var got []string
	report := func(at *yaml.Node, key, problem string) {
		got = append(got, fmt.Sprintf("%d %s: %s", at.Line, key, problem))
	}
	if !MappingProblems(root, nil, report) {
		t.Error("a key given twice: want dup")
	}
	MappingProblems(Lookup(root, "m"), nil, report)
	want := []string{
		"3 a: given twice (first at line 1)",
		`4 : expected a mapping or a list of mappings to merge (<<), got "x"`,
		`5 : anchor "m" holds an alias to itself (*m), which would never end`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

func TestUnknownHint(t *testing.T) {
	t.Parallel()
	type inner struct {
		Rate string `yaml:"rate"`
	}
	type doc struct {
		Name    string `yaml:"name"`
		Backlog inner  `yaml:"backlog"`
	}
	typ := reflect.TypeFor[doc]()
	for name, want := range map[string]string{
		"nme":  " (did you mean name?)",
		"rate": "; rate belongs under backlog",
		"zzz":  "; expected one of name or backlog",
	} {
		if got := UnknownHint(name, typ); got != want {
			t.Errorf("UnknownHint(%q) = %q, want %q", name, got, want)
		}
	}
	if got := JoinOr([]string{"a", "b", "c"}, "and"); got != "a, b and c" {
		t.Errorf("JoinOr = %q", got)
	}
}
