package queue_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spillway-dev/spillway/pkg/queue"
)

func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"", "plain", "two\nlines\r\n", "bad\xffutf8", strings.Repeat("é", 200), "\x00\x7f\t"} {
		f.Add(s, 200)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = max(n%1100, 0)
		got := queue.OneLine(s, n)
		if len(got) > n || !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Errorf("OneLine(%q, %d) = %q: want valid UTF-8 without control characters, at most %d bytes", s, n, got, n)
		}
	})
}

func TestOneLine(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"plain", 10, "plain"},
		{" two\nlines\r\n", 20, "two lines"},
		{"bad\xffutf8", 20, "bad\uFFFDutf8"},
		{"ab éé", 4, "ab"}, // cut inside é, then the space trimmed
		{"\x00\x7f\t", 5, ""},
	} {
		if got := queue.OneLine(c.s, c.n); got != c.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
