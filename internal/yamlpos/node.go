package yamlpos

import (
	"errors"
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// MaxValues bounds the values one file may hold once aliases are expanded:
// yaml.v3 refuses a file whose aliases expand far beyond its size, and a
// reader that walks the node tree stops at this many, so that a small file
// of aliases cannot make it build millions of values.
const MaxValues = 100_000

// TooManyValues is the problem of a file beyond MaxValues.
const TooManyValues = "too many values once aliases are expanded; simplify the file"

// Deref follows aliases to the node they name; nil for nil, or for a chain
// of aliases too long to be a file's.
func Deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil
		}
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is absent or null.
func IsNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// Describe names what a node is, for "got …" in messages: "nothing", "a
// mapping", "a list" or the scalar quoted.
func Describe(n *yaml.Node) string {
	switch {
	case IsNull(n):
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// IsMerge reports whether key k is a merge key (<<).
func IsMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// Pairs calls fn with each key and value of mapping n: its own, then
// those of its merge keys (<<) in order, as yaml.v3 reads merges.
func Pairs(n *yaml.Node, fn func(k, v *yaml.Node)) { pairs(n, 0, fn) }

func pairs(n *yaml.Node, depth int, fn func(k, v *yaml.Node)) {
	if n = Deref(n); n == nil || n.Kind != yaml.MappingNode || depth > 8 {
		return
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !IsMerge(k) {
			fn(k, n.Content[i+1])
		} else if m := Deref(n.Content[i+1]); m != nil && m.Kind == yaml.SequenceNode {
			merges = append(merges, m.Content...)
		} else {
			merges = append(merges, m)
		}
	}
	for _, m := range merges {
		pairs(m, depth+1, fn)
	}
}

// Lookup is the value of key name in mapping n: its own, or else that of
// the first of its merge keys that has it, as yaml.v3 reads merges.
func Lookup(n *yaml.Node, name string) (v *yaml.Node) {
	Pairs(n, func(k, val *yaml.Node) {
		if v == nil && k.Value == name {
			v = val
		}
	})
	return v
}

// Int reads an integer scalar as YAML writes it (1_000, 0x10) or as
// plain text ("10").
func Int(n *yaml.Node) (int64, error) {
	var v int64
	switch n.ShortTag() {
	case "!!int":
		return v, n.Decode(&v)
	case "!!str":
		return strconv.ParseInt(n.Value, 10, 64)
	}
	return 0, errors.New("yamlpos: not an integer")
}

// SelfAlias is the problem of an anchor that holds an alias to itself.
func SelfAlias(name string) string {
	return fmt.Sprintf("anchor %q holds an alias to itself (*%s), which would never end", name, name)
}
