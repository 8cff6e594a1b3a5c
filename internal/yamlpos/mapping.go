package yamlpos

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// MappingProblems finds the problems of mapping n's keys and of those it
// merges that yaml.v3 would refuse or loop on: a key given twice in one
// mapping (dup: yaml.v3 leaves such a mapping unread), a merge (<<) of
// something else than mappings, and a merge of a mapping that holds it
// (open: the mappings being read around n). report gets the node at fault,
// the key given twice ("" for a merge's problem) and the problem.
func MappingProblems(n *yaml.Node, open []*yaml.Node, report func(at *yaml.Node, key, problem string)) (dup bool) {
	var check func(m *yaml.Node, merging []*yaml.Node)
	check = func(m *yaml.Node, merging []*yaml.Node) {
		merging = append(merging, m)
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			for j := 0; j < i; j += 2 {
				if first := m.Content[j]; first.Kind == k.Kind && first.Value == k.Value {
					dup = true
					report(k, k.Value, fmt.Sprintf("given twice (first at line %d)", first.Line))
					break
				}
			}
			if !IsMerge(k) {
				continue
			}
			items := []*yaml.Node{v}
			if dv := Deref(v); dv != nil && dv.Kind == yaml.SequenceNode {
				items = dv.Content
			}
			for _, item := range items {
				switch mi := Deref(item); {
				case mi == nil || mi.Kind != yaml.MappingNode:
					report(item, "", "expected a mapping or a list of mappings to merge (<<), got "+Describe(mi))
				case slices.Contains(merging, mi) || slices.Contains(open, mi):
					report(item, "", SelfAlias(item.Value))
				default:
					check(mi, merging)
				}
			}
		}
	}
	check(n, nil)
	return dup
}

// FieldNames lists the yaml names of a struct's fields, those of an
// inline one included.
func FieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); opts == "inline" {
			names = append(names, FieldNames(f.Type)...)
		} else if name != "" {
			names = append(names, name)
		}
	}
	return names
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// UnknownHint says what a field name unknown to struct t may have meant:
// "(did you mean X?)" for a close name, or the sections of t (fields of
// struct type that do not read themselves from a node) it belongs under,
// or else the fields allowed.
func UnknownHint(name string, t reflect.Type) string {
	known := FieldNames(t)
	if s := Suggest(name, known); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	var under []string
	for i := range t.NumField() {
		f := t.Field(i)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if section, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); ft.Kind() == reflect.Struct && !f.Anonymous &&
			!reflect.PointerTo(ft).Implements(unmarshalerType) && slices.Contains(FieldNames(ft), name) {
			under = append(under, section)
		}
	}
	if len(under) > 0 {
		return fmt.Sprintf("; %s belongs under %s", name, JoinOr(under, "or"))
	}
	return "; expected one of " + JoinOr(known, "or")
}

// JoinOr joins words as "a, b or c" (or "a, b and c" with conj "and").
func JoinOr(words []string, conj string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}
