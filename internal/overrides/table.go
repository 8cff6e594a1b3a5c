package overrides

import (
	"cmp"
	"slices"
)

// Table resolves a tier's overrides: Match gives the override of a key.
// A nil *Table has none. A Table is immutable once built, and safe for
// concurrent use.
type Table struct {
	exact    map[string]*Override
	prefixes []*Override // longest prefix first
	all      []*Override // by pattern
}

// NewTable builds the table of the overrides given, in order of
// precedence: of two with the same pattern the later one stays (the
// admitter gives the configuration's first, the runtime's after). It
// returns nil when there are none.
func NewTable(lists ...[]Override) *Table {
	byPattern := map[Pattern]*Override{}
	for _, list := range lists {
		for i := range list {
			o := list[i]
			byPattern[o.Pattern] = &o
		}
	}
	if len(byPattern) == 0 {
		return nil
	}
	t := &Table{exact: map[string]*Override{}}
	for p, o := range byPattern {
		t.all = append(t.all, o)
		if p.Prefix {
			t.prefixes = append(t.prefixes, o)
		} else {
			t.exact[p.Key] = o
		}
	}
	slices.SortFunc(t.prefixes, func(a, b *Override) int { return cmp.Compare(len(b.Pattern.Key), len(a.Pattern.Key)) })
	slices.SortFunc(t.all, func(a, b *Override) int { return cmp.Compare(a.Pattern.String(), b.Pattern.String()) })
	return t
}

// Match is the override that applies to key: the exact one, else the
// longest matching prefix's; nil when none does.
func (t *Table) Match(key string) *Override {
	if t == nil {
		return nil
	}
	if o := t.exact[key]; o != nil {
		return o
	}
	for _, o := range t.prefixes {
		if o.Pattern.Match(key) {
			return o
		}
	}
	return nil
}

// Get is the override of exactly pattern p, or nil.
func (t *Table) Get(p Pattern) *Override {
	if t == nil {
		return nil
	}
	for _, o := range t.all {
		if o.Pattern == p {
			return o
		}
	}
	return nil
}

// List is every override, ordered by pattern.
func (t *Table) List() []Override {
	if t == nil {
		return nil
	}
	out := make([]Override, len(t.all))
	for i, o := range t.all {
		out[i] = *o
	}
	return out
}

// Len is how many overrides the table holds.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.all)
}
