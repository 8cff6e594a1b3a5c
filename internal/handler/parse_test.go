package handler

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		value, date string
		want        time.Duration
		ok          bool
	}{
		{"", "", 0, false},
		{"0", "", 0, true},
		{" 42 ", "", 42 * time.Second, true},
		{"3600", "", time.Hour, true},
		{"3601", "", MaxRetryAfter, true},
		{"18446744073709551616", "", MaxRetryAfter, true}, // overflows uint64
		{"+5", "", 0, false},
		{"-5", "", 0, false},
		{"1.5", "", 0, false},
		{"5s", "", 0, false},
		{date(90 * time.Second), "", 90 * time.Second, true},
		{date(-time.Minute), "", 0, true},
		{date(30 * time.Hour), "", MaxRetryAfter, true},
		// Measured from the answer's Date when it has one: its clock, not ours.
		{now.Add(time.Hour + 10*time.Second).Format(http.TimeFormat), now.Add(time.Hour).Format(http.TimeFormat), 10 * time.Second, true},
		{date(20 * time.Second), "garbage", 20 * time.Second, true},
		{"Sunday, 06-Nov-94 08:49:37 GMT", "", 0, true}, // RFC 850, long past
		{"tomorrow", "", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.value, tt.date, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q, Date %q) = %v, %v; want %v, %v", tt.value, tt.date, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "120", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "-1"} {
		f.Add(s)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, "", now)
		if d < 0 || d > MaxRetryAfter || (!ok && d != 0) {
			t.Errorf("parseRetryAfter(%q) = %v, %v: want 0 to %v", v, d, ok, MaxRetryAfter)
		}
	})
}
