package door

import (
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// headers is a header lookup over a map, as the doors give one.
func headers(h map[string]string) func(string) string {
	return func(k string) string { return h[k] }
}

// parseSchedule reads the three timing headers, and refuses malformed
// values and both start headers at once, naming the header.
func TestParseSchedule(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	got, bad := parseSchedule(headers(map[string]string{
		spillway.HeaderNotBefore: at.Format(time.RFC3339), spillway.HeaderMaxWait: "30s",
	}))
	if bad != nil || !got.NotBefore.Equal(at) || got.MaxWait == nil || *got.MaxWait != 30*time.Second {
		t.Errorf("not-before and max-wait: %+v, %v", got, bad)
	}
	got, bad = parseSchedule(headers(map[string]string{spillway.HeaderDelay: "10m"}))
	if bad != nil || got.Delay != 10*time.Minute || got.MaxWait != nil {
		t.Errorf("delay: %+v, %v", got, bad)
	}
	for _, c := range []struct {
		h     map[string]string
		field string
	}{
		{map[string]string{spillway.HeaderNotBefore: at.Format(time.RFC3339), spillway.HeaderDelay: "1s"}, spillway.HeaderDelay},
		{map[string]string{spillway.HeaderNotBefore: "tomorrow"}, spillway.HeaderNotBefore},
		{map[string]string{spillway.HeaderDelay: "10"}, spillway.HeaderDelay},
		{map[string]string{spillway.HeaderDelay: "-1s"}, spillway.HeaderDelay},
		{map[string]string{spillway.HeaderMaxWait: "soon"}, spillway.HeaderMaxWait},
		{map[string]string{spillway.HeaderMaxWait: "-5s"}, spillway.HeaderMaxWait},
		{map[string]string{spillway.HeaderDelay: "10m", spillway.HeaderMaxWait: "30s"}, spillway.HeaderMaxWait},
	} {
		_, bad := parseSchedule(headers(c.h))
		if bad == nil || bad.Type != spillway.ProblemBadRequest || bad.Field != c.field || !strings.Contains(bad.Detail, c.field) {
			t.Errorf("%v: %v, want bad-request naming %s", c.h, bad, c.field)
		}
	}
}

// parseSchedule never panics, and refuses what it cannot use with a
// bad-request naming one of its headers; what it accepts has no negative
// duration and no delay longer than the max-wait.
func FuzzParseSchedule(f *testing.F) {
	f.Add("2026-01-02T15:04:05Z", "", "30s")
	f.Add("", "10m", "1h")
	f.Add("", "-1s", "")
	f.Add("x", "1", "9999999999h")
	f.Add("2026-01-02T15:04:05.123456789+01:00", "0s", "0s")
	f.Fuzz(func(t *testing.T, notBefore, delay, maxWait string) {
		h := map[string]string{spillway.HeaderNotBefore: notBefore, spillway.HeaderDelay: delay, spillway.HeaderMaxWait: maxWait}
		s, bad := parseSchedule(headers(h))
		if bad != nil {
			if bad.Type != spillway.ProblemBadRequest || !strings.HasPrefix(bad.Field, "Spillway-") || !strings.Contains(bad.Detail, bad.Field) {
				t.Fatalf("%q %q %q: %v, want bad-request naming the header", notBefore, delay, maxWait, bad)
			}
			return
		}
		if s.Delay < 0 || (s.MaxWait != nil && (*s.MaxWait < 0 || s.Delay > *s.MaxWait)) || (notBefore != "" && delay != "") {
			t.Fatalf("%q %q %q: accepted %+v", notBefore, delay, maxWait, s)
		}
		if notBefore == "" && !s.NotBefore.Equal(time.Time{}) {
			t.Fatalf("no %s, yet not-before %v", spillway.HeaderNotBefore, s.NotBefore)
		}
	})
}
