package door

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Every admitted job over HTTP is answered with about ten headers and a
// small JSON body. Header.Set takes two allocations a value (its string
// and its one-element slice) and json.Marshal walks the reply by
// reflection; the answer of a submission is built here instead, its
// header values and its body (appendSubmitReply) in one buffer, the
// same bytes as before.

// answerHeaders collects an answer's header values, set under their
// canonical names at once (set): one string holds the values appended to
// buf, and one slice them all. The zero value is ready to use; it holds
// at most maxAnswerHeaders values.
type answerHeaders struct {
	buf   []byte
	from  int // where the next value in buf starts
	n     int
	names [maxAnswerHeaders]string
	vals  [maxAnswerHeaders]string // a value given whole (addValue)
	spans [maxAnswerHeaders][2]int // or where its bytes in buf start and end; {-1, -1} for a whole one
}

const maxAnswerHeaders = 12

// add ends the value appended to a.buf since the last add (or skip),
// under name (canonical).
func (a *answerHeaders) add(name string) {
	a.names[a.n], a.spans[a.n] = name, [2]int{a.from, len(a.buf)}
	a.from = len(a.buf)
	a.n++
}

// skip leaves what was appended to a.buf since the last add out of the
// values.
func (a *answerHeaders) skip() { a.from = len(a.buf) }

// addValue adds v under name (canonical).
func (a *answerHeaders) addValue(name, v string) {
	a.names[a.n], a.vals[a.n], a.spans[a.n] = name, v, [2]int{-1, -1}
	a.n++
}

// set sets the values added in h, each replacing what h held under its
// name, each in a slice of its own (capacity 1), as Header.Set makes it.
func (a *answerHeaders) set(h http.Header) {
	if a.n == 0 {
		return
	}
	s := string(a.buf)
	vals := make([]string, a.n)
	for i, name := range a.names[:a.n] {
		if sp := a.spans[i]; sp[0] < 0 {
			vals[i] = a.vals[i]
		} else {
			vals[i] = s[sp[0]:sp[1]]
		}
		h[name] = vals[i : i+1 : i+1]
	}
}

// Canonical names of the headers a submission's answer carries.
var (
	headerContentType = http.CanonicalHeaderKey("Content-Type")
	headerLocation    = http.CanonicalHeaderKey("Location")
	headerStatus      = http.CanonicalHeaderKey(spillway.HeaderStatus)

	headerRateLimitPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	headerRateLimit           = http.CanonicalHeaderKey("RateLimit")
	headerXRateLimitLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	headerXRateLimitRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	headerXRateLimitReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// appendSubmitReply appends rep as json.Marshal spells it. The fields
// of an admitted or queued job without a schedule are written directly;
// a reply with a time, or a string that JSON must escape, is left to
// json.Marshal.
func appendSubmitReply(b []byte, rep *spillway.SubmitReply) []byte {
	if rep.NotBefore != nil || rep.EstimatedStart != nil ||
		!plainJSON(rep.ID) || !plainJSON(rep.Queue) || !plainJSON(string(rep.Status)) || !plainJSON(rep.Error) || !plainJSON(rep.Type) {
		m, err := json.Marshal(*rep)
		if err != nil { // never: every field encodes
			panic("door: encoding a submission's answer: " + err.Error())
		}
		return append(b, m...)
	}
	b = append(b, '{')
	if rep.ID != "" {
		b = append(b, `"id":"`...)
		b = append(b, rep.ID...)
		b = append(b, `",`...)
	}
	b = append(b, `"queue":"`...)
	b = append(b, rep.Queue...)
	b = append(b, `","status":"`...)
	b = append(b, rep.Status...)
	b = append(b, '"')
	if rep.Position != 0 {
		b = append(b, `,"position":`...)
		b = strconv.AppendInt(b, rep.Position, 10)
	}
	if rep.RetryAfterMS != 0 {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, rep.RetryAfterMS, 10)
	}
	if rep.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	if rep.Error != "" {
		b = append(b, `,"error":"`...)
		b = append(b, rep.Error...)
		b = append(b, '"')
	}
	if rep.Type != "" {
		b = append(b, `,"type":"`...)
		b = append(b, rep.Type...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// plainJSON reports whether json.Marshal writes s as it is, between
// quotes: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML (<, > and &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// writeSubmitReply answers an admitted or queued submission: 202 with
// Location, Spillway-Status and rep as JSON, and the headers in a (the
// rate limits', added before). The body is appended to a.buf among the
// header values, which set copies: one buffer for both.
//
// Content-Length is the server's to set: it gives an answer whose
// handler returns unflushed with less than its buffer (2 kB; this body
// is a few hundred bytes at most) the same value. Without it the
// handler sets eight headers, which a Go map holds in its first group of
// slots; a ninth grew the map, and the copy the server makes of it when
// the status is written.
func writeSubmitReply(w http.ResponseWriter, a *answerHeaders, rep *spillway.SubmitReply) {
	a.buf = append(a.buf, "/v1/jobs/"...)
	a.buf = append(a.buf, rep.ID...)
	a.add(headerLocation)
	start := len(a.buf)
	a.buf = append(appendSubmitReply(a.buf, rep), '\n')
	body := a.buf[start:]
	a.skip()
	a.addValue(headerContentType, "application/json")
	a.addValue(headerStatus, string(rep.Status))
	a.set(w.Header())
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(body)
}
