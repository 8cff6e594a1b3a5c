package handler

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A handler's errors end up in a job's last_error, which every submit key
// may read (GET /v1/jobs/{id}), and in the worker's logs. So they name the
// downstream by scheme, host and path only — a URL's user info and query
// often hold a credential (?token=…) — and quote at most a short, cleaned
// excerpt of what the downstream said, which may echo anything.

const (
	// excerptLen bounds the excerpt of a failing downstream's body (and of
	// an HTTP status line) that goes into an error, in bytes.
	excerptLen = 80
	// errorTextLen bounds a NATS responder's Spillway-Error text, which
	// it writes for the job's record.
	errorTextLen = 256
	// excerptRead is how much of a failing body is read for the excerpt:
	// enough that the excerpt is full after whitespace is folded.
	excerptRead = 4 * excerptLen
)

// excerpt is s as one line of at most n bytes (plus "…" when cut): invalid
// UTF-8 and characters that do not print (control, format, unassigned)
// become U+FFFD, runs of white space one space, and the ends are trimmed.
func excerpt(s string, n int) string {
	var b strings.Builder
	space, cut := false, false
	for _, r := range s { // an invalid byte ranges as utf8.RuneError, U+FFFD
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case !unicode.IsPrint(r):
			r = utf8.RuneError
		}
		w := utf8.RuneLen(r)
		if space {
			w++
		}
		if b.Len()+w > n {
			cut = true
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	if cut {
		b.WriteString("…")
	}
	return b.String()
}

// shownURL is u as errors and logs show it: scheme://host/path, without
// user info, query or fragment.
func shownURL(u *url.URL) string {
	if u.Host == "" { // not a URL an HTTP handler accepts: show what is safe
		return cleanURL(u.String())
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// cleanURL is raw, a URL that may not parse, as shownURL shows it. When it
// does not parse, everything up to its last '@' after the scheme and
// everything from its first '?' or '#' are dropped: a path holding '@' is
// cut short, but no user info or query is ever shown.
func cleanURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return shownURL(u)
	}
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+len("://")], raw[i+len("://"):]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + rest
}

// scrubURLs rewrites every scheme://… URL in s as cleanURL shows it, so
// that the text of an error from below (net/http's, which may quote a
// redirect's Location) tells no credential. A URL ends at white space or a
// quote.
func scrubURLs(s string) string {
	const sep = "://"
	var b strings.Builder
	for {
		i := strings.Index(s, sep)
		if i < 0 {
			break
		}
		start := i
		for start > 0 && isSchemeByte(s[start-1]) {
			start--
		}
		end := i + len(sep)
		for end < len(s) && !strings.ContainsRune(" \t\r\n\"'`<>", rune(s[end])) {
			end++
		}
		b.WriteString(s[:start])
		b.WriteString(cleanURL(s[start:end]))
		s = s[end:]
	}
	b.WriteString(s)
	return b.String()
}

func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// scrubbedError is an error from below whose text went through scrubURLs;
// it still unwraps to the original, so errors.Is and errors.As see through.
type scrubbedError struct {
	text string
	err  error
}

func scrub(err error) error {
	text := err.Error()
	if clean := scrubURLs(text); clean != text {
		return &scrubbedError{text: clean, err: err}
	}
	return err
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }
