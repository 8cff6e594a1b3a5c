package spillway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestParseProblem(t *testing.T) {
	body := []byte(`{"type":"https://spillway.dev/problems/queue-full","title":"Queue full","status":429,"retry_after_ms":1500}`)
	for _, c := range []struct {
		name, contentType string
		body              []byte
		ok                bool
	}{
		{"problem+json", "application/problem+json", body, true},
		{"with parameters", "application/problem+json; charset=utf-8", body, true},
		{"plain json", "application/json", body, false},
		{"no content type", "", body, false},
		{"not json", "application/problem+json", []byte("<html>"), false},
	} {
		p, ok := spillway.ParseProblem(c.contentType, c.body)
		if ok != c.ok {
			t.Errorf("%s: ok = %v, want %v", c.name, ok, c.ok)
		}
		if ok && (p.Status != 429 || p.RetryAfterMS != 1500 || spillway.ProblemReason(p.Type) != "queue-full") {
			t.Errorf("%s: %+v, want status 429, retry_after_ms 1500, type .../queue-full", c.name, p)
		}
		if !ok && p != (spillway.Problem{}) {
			t.Errorf("%s: not a problem, yet %+v", c.name, p)
		}
	}
}

func TestProblemReason(t *testing.T) {
	for typ, want := range map[string]string{
		spillway.ProblemQueueFull: "queue-full",
		spillway.ProblemKeyFull:   "key-full",
		"about:blank":             "about:blank",
		"":                        "",
	} {
		if got := spillway.ProblemReason(typ); got != want {
			t.Errorf("ProblemReason(%q) = %q, want %q", typ, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	for _, c := range []struct {
		name string
		h    http.Header
		p    spillway.Problem
		want time.Duration
	}{
		{"problem wins", hdr("9"), spillway.Problem{RetryAfterMS: 1500}, 1500 * time.Millisecond},
		{"seconds", hdr(" 3 "), spillway.Problem{}, 3 * time.Second},
		{"http date", hdr(now.Add(7 * time.Second).Format(http.TimeFormat)), spillway.Problem{}, 7 * time.Second},
		{"date in the past", hdr(now.Add(-time.Minute).Format(http.TimeFormat)), spillway.Problem{}, 0},
		{"negative", hdr("-1"), spillway.Problem{}, 0},
		{"garbage", hdr("soon"), spillway.Problem{}, 0},
		{"none", http.Header{}, spillway.Problem{}, 0},
	} {
		if got := spillway.RetryAfter(c.h, c.p, now); got != c.want {
			t.Errorf("%s: RetryAfter = %v, want %v", c.name, got, c.want)
		}
	}
}
