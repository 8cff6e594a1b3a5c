package handler

import (
	"errors"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// DefaultTimeout is how long a handler waits for its downstream when its
// config gives no timeout.
const DefaultTimeout = 10 * time.Second

// Config is what runs a queue's jobs in a worker (a queue's handler:). At
// most one of HTTP, NATS and Log is set; the zero value is no handler (an
// admit-only queue, which a worker refuses to run).
type Config struct {
	HTTP *HTTPConfig
	NATS *NATSConfig
	// Log logs each job and succeeds (the dev-mode demo queue).
	Log bool
}

// HTTPConfig POSTs each job to URL (docs/design.md#handlers).
type HTTPConfig struct {
	URL     string
	Timeout time.Duration // 0: DefaultTimeout
	// Headers are added to every request. nil: none.
	Headers map[string]string
}

// NATSConfig sends each job as a request to Subject.
type NATSConfig struct {
	Subject string
	Timeout time.Duration // 0: DefaultTimeout
}

// FieldError is one setting of a Config that cannot be used, named as the
// configuration file names it (http.url, http.headers.NAME, nats.subject).
// It wraps ErrInvalidConfig.
type FieldError struct {
	Field string
	// Want is what was expected and Got the value found, quoted (a
	// password redacted); or Reason says what is wrong instead.
	Want, Got, Reason string
}

// Problem is the error without the field: "expected WANT, got GOT" or the
// reason.
func (e *FieldError) Problem() string {
	if e.Reason != "" {
		return e.Reason
	}
	return "expected " + e.Want + ", got " + e.Got
}

func (e *FieldError) Error() string { return "handler: " + e.Field + ": " + e.Problem() }

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

const (
	wantURL     = `an http:// or https:// URL such as "http://127.0.0.1:9000/send"`
	wantSubject = `a NATS subject such as "jobs.email" (no spaces or wildcards)`
)

// Validate reports every setting of c that cannot be used, each a
// *FieldError, joined (errors.Join); nil if there is none. Having no
// handler, or more than one, is the caller's to judge (New refuses both).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, want, got, reason string) {
		errs = append(errs, &FieldError{Field: field, Want: want, Got: strconv.Quote(got), Reason: reason})
	}
	if h := c.HTTP; h != nil {
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("http.url", wantURL, redact(h.URL), "")
		}
		if h.Timeout < 0 {
			bad("http.timeout", "a duration ≥ 0", h.Timeout.String(), "")
		}
		for name, v := range h.Headers {
			field := "http.headers." + name
			switch canon := textproto.CanonicalMIMEHeaderKey(name); {
			case !spillway.IsToken(name):
				bad(field, "a header name (letters, digits and !#$%&'*+-.^_`|~)", name, "")
			case reserved(canon):
				bad(field, "", "", "header "+canon+" is set by the worker for every job and cannot be configured")
			case !validHeaderValue(v):
				bad(field, "a header value on one line, of UTF-8 text without control characters", v, "")
			}
		}
	}
	if n := c.NATS; n != nil {
		if !validSubject(n.Subject) {
			bad("nats.subject", wantSubject, n.Subject, "")
		}
		if n.Timeout < 0 {
			bad("nats.timeout", "a duration ≥ 0", n.Timeout.String(), "")
		}
	}
	return errors.Join(errs...)
}

// reserved reports whether a handler config may not set the header name
// (canonical): Spillway sets its own headers and Idempotency-Key.
func reserved(name string) bool {
	return strings.HasPrefix(name, "Spillway-") || name == spillway.HeaderIdempotencyKey
}

// validSubject accepts a subject one can publish to: non-empty tokens
// separated by dots, no whitespace, no wildcard tokens.
func validSubject(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f\v") {
			return false
		}
	}
	return true
}

// redact hides a URL's user info and query, so that an error does not
// print a secret.
func redact(s string) string { return cleanURL(s) }
