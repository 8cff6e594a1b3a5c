package overrides_test

import (
	"errors"
	"testing"

	"github.com/spillway-dev/spillway/internal/overrides"
)

func mustPattern(t *testing.T, s string) overrides.Pattern {
	t.Helper()
	p, err := overrides.ParsePattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMatchPrecedence: exact over prefix, a longer prefix over a shorter
// one, and for the same pattern the later list (the runtime's) over the
// earlier (the configuration's).
func TestMatchPrecedence(t *testing.T) {
	t.Parallel()
	o := func(pattern string, src overrides.Source) overrides.Override {
		return overrides.Override{Pattern: mustPattern(t, pattern), Source: src}
	}
	table := overrides.NewTable(
		[]overrides.Override{o("*", overrides.SourceConfig), o("t-*", overrides.SourceConfig), o("t-a", overrides.SourceConfig), o("t-ab*", overrides.SourceConfig)},
		[]overrides.Override{o("t-a", overrides.SourceRuntime), o("t-abc*", overrides.SourceRuntime)},
	)
	for _, tt := range []struct {
		key, pattern string
		src          overrides.Source
	}{
		{"t-a", "t-a", overrides.SourceRuntime},
		{"t-ab", "t-ab*", overrides.SourceConfig},
		{"t-abcd", "t-abc*", overrides.SourceRuntime},
		{"t-b", "t-*", overrides.SourceConfig},
		{"u", "*", overrides.SourceConfig},
		{"", "*", overrides.SourceConfig},
	} {
		m := table.Match(tt.key)
		if m == nil || m.Pattern.String() != tt.pattern || m.Source != tt.src {
			t.Errorf("Match(%q) = %+v, want %s from %s", tt.key, m, tt.pattern, tt.src)
		}
	}
	if n := table.Len(); n != 5 {
		t.Errorf("Len = %d, want 5 (t-a once)", n)
	}
	var none *overrides.Table
	if none.Match("x") != nil || none.Len() != 0 || overrides.NewTable(nil, nil) != nil {
		t.Error("an empty table matches something")
	}
}

func TestParsePattern(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in     string
		key    string
		prefix bool
		bad    bool
	}{
		{"tenant-a", "tenant-a", false, false},
		{"tenant-*", "tenant-", true, false},
		{"*", "", true, false},
		{"", "", false, true},
		{"a*b", "", false, true},
		{"**", "", false, true},
	} {
		p, err := overrides.ParsePattern(tt.in)
		if tt.bad {
			if !errors.Is(err, overrides.ErrInvalidPattern) {
				t.Errorf("ParsePattern(%q) = %+v, %v; want ErrInvalidPattern", tt.in, p, err)
			}
			continue
		}
		if err != nil || p.Key != tt.key || p.Prefix != tt.prefix || p.String() != tt.in {
			t.Errorf("ParsePattern(%q) = %+v, %v", tt.in, p, err)
		}
	}
}

// FuzzParsePattern: any text is a pattern or an ErrInvalidPattern, never
// a panic; a pattern writes back as it was read, and matches what it
// says it does.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"tenant-a", "tenant-*", "*", "", "a*b", "**", "\x00*"} {
		f.Add(s, "tenant-abc")
	}
	f.Fuzz(func(t *testing.T, s, key string) {
		p, err := overrides.ParsePattern(s)
		if err != nil {
			if !errors.Is(err, overrides.ErrInvalidPattern) {
				t.Fatalf("ParsePattern(%q): %v, not an ErrInvalidPattern", s, err)
			}
			return
		}
		if p.String() != s {
			t.Fatalf("ParsePattern(%q).String() = %q", s, p.String())
		}
		want := key == s || (p.Prefix && len(key) >= len(p.Key) && key[:len(p.Key)] == p.Key)
		if p.Match(key) != want {
			t.Fatalf("%q matches %q: %v, want %v", s, key, p.Match(key), want)
		}
	})
}
