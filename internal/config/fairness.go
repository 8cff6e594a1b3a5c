package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// fairnessDoc is a backlog's fairness section: how the leak is shared
// among keys and priority classes (docs/design.md#fair-drain).
type fairnessDoc struct {
	Weights  field `yaml:"weights"`
	MinShare field `yaml:"min_share"`
}

// fairness reads a backlog's fairness section into dst; queue's
// ValidateGiven judges the values, and o places its problems: each rule
// is a field of o named as queue names it (fairness.weights["KEY"]).
//
// weights maps a key, or a prefix ending in * ("*" alone: every key), to
// its weight. YAML mappings have no order, so the rules are sorted, most
// specific first — exact keys (by key), then prefixes from the longest —
// and the first rule that matches a key is the one queue.Fairness.WeightOf
// picks; the result depends on the rules, not on how the file lists them.
func (d *decoder) fairness(s *section[fairnessDoc], o *owned, dst *queue.Fairness) {
	f := &s.doc
	o.fields["fairness.min_share"] = &f.MinShare
	if v := f.MinShare.val; v != nil {
		dst.MinShare = math.NaN() // refused by queue, as owned.int's -1
		if v.Kind == yaml.ScalarNode {
			if x, ok := parseShare(v.Value); ok {
				dst.MinShare = x
			}
		}
	}
	n := f.Weights.val
	if n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(&f.Weights, "expected a mapping of keys (or prefixes ending in *) to weights, got %s", describe(n))
		return
	}
	first := map[string]int{}
	d.entries(n, f.Weights.path, "a key or a prefix ending in *", func(k, v, raw *yaml.Node) {
		path := fmt.Sprintf("%s[%q]", f.Weights.path, k.Value)
		if k.Value == "" {
			d.addf(k, path, `expected a key, or a prefix ending in * ("*" alone: every key)`)
			return
		}
		if line, dup := first[k.Value]; dup {
			d.addf(k, path, "given twice (first at line %d)", line)
			return
		}
		first[k.Value] = k.Line
		r := queue.WeightRule{KeyPattern: queue.KeyPattern{Key: k.Value}, Weight: -1} // -1: refused by queue, as owned.int's
		if key, ok := strings.CutSuffix(k.Value, "*"); ok {
			r.Key, r.Prefix = key, true
		}
		if v != nil && v.Kind == yaml.ScalarNode {
			if w, err := yamlInt(v); err == nil {
				r.Weight = int(min(max(w, -1), queue.MaxWeight+1))
			}
		}
		if v == nil { // a null is given, as nothing
			v = raw
		}
		o.fields[fmt.Sprintf("fairness.weights[%q]", r.String())] = &field{path: path, key: k, val: v, holder: n}
		dst.Weights = append(dst.Weights, r)
	})
	slices.SortFunc(dst.Weights, func(a, b queue.WeightRule) int {
		if a.Prefix != b.Prefix {
			if a.Prefix {
				return 1
			}
			return -1
		}
		if a.Prefix && len(a.Key) != len(b.Key) {
			return len(b.Key) - len(a.Key)
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

// parseShare reads a fraction (0.1) or a percentage (10%).
func parseShare(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	pct, isPct := strings.CutSuffix(s, "%")
	x, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
	if err != nil {
		return 0, false
	}
	if isPct {
		x /= 100
	}
	return x, true
}
