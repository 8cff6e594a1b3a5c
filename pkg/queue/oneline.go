package queue

import (
	"strings"
	"unicode/utf8"
)

// OneLine makes s fit one line of at most n bytes, as HeaderLastError is
// written: control characters become spaces, invalid UTF-8 becomes
// U+FFFD, surrounding space is trimmed and it is cut on a rune boundary.
// Callers that show or keep an error text beside a dead letter's (a job's
// status record, a worker's error) use it so the two read alike.
func OneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.TrimSpace(s)
}
