package admit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// ParseSchedule never panics, and refuses what it cannot use with a
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
		s, err := admit.ParseSchedule(func(k string) string { return h[k] })
		if err != nil {
			var e *admit.Error
			if !errors.As(err, &e) || e.Type != spillway.ProblemBadRequest || !strings.HasPrefix(e.Field, "Spillway-") || !strings.Contains(e.Detail, e.Field) {
				t.Fatalf("%q %q %q: %v, want bad-request naming the header", notBefore, delay, maxWait, err)
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
