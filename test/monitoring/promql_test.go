package monitoring

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// selector is one metric named in a PromQL expression, with the label
// names its matchers use ({queue=~"$queue"} → queue).
type selector struct {
	Metric string
	Labels []string
}

// promqlWords are PromQL's keywords: identifiers that are not metrics.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "inf": true, "nan": true,
}

// labelListWords take a parenthesised list of label names.
var labelListWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// metricSelectors scans a PromQL expression, which may hold Grafana
// variables ($queue, ${queue}, $__rate_interval), for the metrics it
// selects. It is a lexical scan, not a parser: it needs only to tell
// metric names from function names, keywords, label names, strings,
// numbers and durations, which PromQL's grammar makes possible token by
// token. An error means the scan did not understand the expression.
func metricSelectors(expr string) ([]selector, error) {
	var out []selector
	i := 0
	n := len(expr)
	for i < n {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#': // a comment runs to the end of the line
			for i < n && expr[i] != '\n' {
				i++
			}
		case c == '$':
			i = skipVariable(expr, i)
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ at %d in %q", i, expr)
			}
			i += end + 1
		case c == '{':
			// A selector without a metric name: {__name__="x"}.
			labels, names, end, err := matchers(expr, i)
			if err != nil {
				return nil, err
			}
			for _, name := range names {
				out = append(out, selector{Metric: name, Labels: labels})
			}
			if len(names) == 0 {
				return nil, fmt.Errorf("a selector without a metric name at %d in %q", i, expr)
			}
			i = end
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(expr[i+1])):
			// A number or a duration (5m, 1.5e3, 0x1f).
			for i < n && (isIdentChar(expr[i]) || expr[i] == '.' || ((expr[i] == '+' || expr[i] == '-') && (expr[i-1] == 'e' || expr[i-1] == 'E'))) {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < n && isIdentChar(expr[i]) {
				i++
			}
			word := expr[start:i]
			j := skipSpace(expr, i)
			switch {
			case labelListWords[strings.ToLower(word)]:
				if j < n && expr[j] == '(' {
					end := strings.IndexByte(expr[j:], ')')
					if end < 0 {
						return nil, fmt.Errorf("unclosed label list after %s in %q", word, expr)
					}
					i = j + end + 1
				}
			case promqlWords[strings.ToLower(word)]:
			case j < n && expr[j] == '(':
				// A function or an aggregation: its arguments are scanned next.
			case aggregationModifier(expr[j:]):
				// sum by (queue) (…): the label list and arguments come next.
			default:
				sel := selector{Metric: word}
				if j < n && expr[j] == '{' {
					labels, names, end, err := matchers(expr, j)
					if err != nil {
						return nil, err
					}
					if len(names) > 0 {
						return nil, fmt.Errorf("%s{__name__=...} in %q: two metric names", word, expr)
					}
					sel.Labels = labels
					i = end
				}
				out = append(out, sel)
			}
		default:
			i++ // operators and punctuation
		}
	}
	return out, nil
}

// matchers reads the label matchers {…} starting at expr[i] == '{'. It
// returns the label names, the values of __name__ matchers, and the
// index after the closing brace.
func matchers(expr string, i int) (labels, names []string, end int, err error) {
	i++ // {
	for {
		i = skipSpace(expr, i)
		if i >= len(expr) {
			return nil, nil, 0, fmt.Errorf("unclosed { in %q", expr)
		}
		switch c := expr[i]; {
		case c == '}':
			return labels, names, i + 1, nil
		case c == ',':
			i++
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
			label := expr[start:i]
			i = skipSpace(expr, i)
			op := i
			for i < len(expr) && strings.IndexByte("=!~", expr[i]) >= 0 {
				i++
			}
			if op == i {
				return nil, nil, 0, fmt.Errorf("label %s without a matcher in %q", label, expr)
			}
			i = skipSpace(expr, i)
			if i >= len(expr) || strings.IndexByte("\"'`", expr[i]) < 0 {
				return nil, nil, 0, fmt.Errorf("label %s without a quoted value in %q", label, expr)
			}
			vend, err := skipString(expr, i)
			if err != nil {
				return nil, nil, 0, err
			}
			if label == "__name__" && expr[op:op+1] == "=" && expr[op+1] != '~' {
				names = append(names, expr[i+1:vend-1])
			} else {
				labels = append(labels, label)
			}
			i = vend
		default:
			return nil, nil, 0, fmt.Errorf("unexpected %q in label matchers of %q", c, expr)
		}
	}
}

// aggregationModifier reports whether s starts with the word by or
// without: the word before it is an aggregation operator.
func aggregationModifier(s string) bool {
	for _, w := range []string{"by", "without"} {
		if len(s) > len(w) && strings.EqualFold(s[:len(w)], w) && !isIdentChar(s[len(w)]) {
			return true
		}
	}
	return false
}

// skipString returns the index after the string literal at expr[i].
func skipString(expr string, i int) (int, error) {
	q := expr[i]
	for j := i + 1; j < len(expr); j++ {
		switch expr[j] {
		case '\\':
			if q != '`' {
				j++
			}
		case q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d in %q", i, expr)
}

// skipVariable returns the index after the Grafana variable at expr[i]
// == '$': $name or ${name} or ${name:format}.
func skipVariable(expr string, i int) int {
	i++
	if i < len(expr) && expr[i] == '{' {
		if end := strings.IndexByte(expr[i:], '}'); end >= 0 {
			return i + end + 1
		}
		return len(expr)
	}
	for i < len(expr) && isIdentChar(expr[i]) {
		i++
	}
	return i
}

func skipSpace(s string, i int) int {
	for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

// TestMetricSelectors is the scanner's own timeline of cases: what it
// must find in expressions like the dashboard's and the alerts'.
func TestMetricSelectors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []selector
	}{
		{`up`, []selector{{Metric: "up"}}},
		{`max by (queue) (spillway_queue_depth{queue=~"$queue"}) > 0.8`,
			[]selector{{Metric: "spillway_queue_depth", Labels: []string{"queue"}}}},
		{`histogram_quantile(0.99, sum by (queue, le) (rate(x_bucket{queue=~"${queue}", le!="+Inf"}[$__rate_interval])))`,
			[]selector{{Metric: "x_bucket", Labels: []string{"queue", "le"}}}},
		{`sum(rate(a_total[5m] offset 1h)) without (instance) / on (queue) group_left(mode) b`,
			[]selector{{Metric: "a_total"}, {Metric: "b"}}},
		{`(a > 0) unless on (queue) (b > 0) and bool c or d`,
			[]selector{{Metric: "a"}, {Metric: "b"}, {Metric: "c"}, {Metric: "d"}}},
		{`{__name__="named", job="x"} + count_over_time(e[1m:10s]) * 1.5e-3 + 0x1F`,
			[]selector{{Metric: "named", Labels: []string{"job"}}, {Metric: "e"}}},
		{`label_replace(f{a="}{", b='it\'s'}, "dst", "$1", "src", "(.*)")`,
			[]selector{{Metric: "f", Labels: []string{"a", "b"}}}},
		{"g # a comment naming not_a_metric\n + h", []selector{{Metric: "g"}, {Metric: "h"}}},
		{`vector(1) + Inf + NaN`, nil},
	} {
		got, err := metricSelectors(tc.expr)
		if err != nil {
			t.Errorf("metricSelectors(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("metricSelectors(%q)\n got %+v\nwant %+v", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`a{b="c"`, `rate(a[5m)`, `a{b}`, `a{b="c}`, `{job="x"}`} {
		if got, err := metricSelectors(bad); err == nil {
			t.Errorf("metricSelectors(%q) = %+v, want an error", bad, got)
		}
	}
}

// sortedKeys is the sorted keys of a set.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
