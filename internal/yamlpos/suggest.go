package yamlpos

import (
	"fmt"
	"strings"
)

// Suggest returns the candidate closest to s if it is close enough to be a
// likely typo ("leak-rate" → "leak_rate", "failuremode" → "failure_mode"),
// or the only candidate that s abbreviates ("leaky" → "leaky_bucket"), or "".
func Suggest(s string, candidates []string) string {
	norm := func(x string) string { return strings.ReplaceAll(strings.ToLower(x), "-", "_") }
	if len(s) >= 3 {
		var prefixOf []string
		for _, c := range candidates {
			if strings.HasPrefix(norm(c), norm(s)) {
				prefixOf = append(prefixOf, c)
			}
		}
		if len(prefixOf) == 1 {
			return prefixOf[0]
		}
	}
	best, bestDist := "", -1
	for _, c := range candidates {
		d := distance(norm(s), norm(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	// Allow one edit per three characters, at least one and at most three.
	if bestDist < 0 || bestDist > min(3, max(1, len(best)/3)) {
		return ""
	}
	return best
}

// WithSuggestion appends "(did you mean X?)" to err when one candidate is
// close to got.
func WithSuggestion(err error, got string, candidates []string) error {
	if s := Suggest(got, candidates); s != "" {
		return fmt.Errorf("%w (did you mean %s?)", err, s)
	}
	return err
}

// distance is the Levenshtein distance between a and b, in bytes; the names
// suggested are ASCII.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not a typo of a field name; save the work
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
