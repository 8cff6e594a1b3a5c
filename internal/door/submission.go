package door

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// requestOf reads a submission's headers, the same way for both doors
// and for every job of a batch (batch.go), into the typed request the
// admitter decides on: Spillway-Cost, Spillway-Priority, the idempotency
// key (Idempotency-Key; on the NATS door Nats-Msg-Id too), the schedule
// (Spillway-Not-Before, Spillway-Delay, Spillway-Max-Wait) and the trace
// context. get looks a header up by name, in any case; the request keeps
// it as its Keys, for the header:NAME tiers, whose values are opaque. A
// header the request cannot be read with is an *admit.Error naming it;
// the door answers 400, or a batch that job's result.
//
// This is the only place a submission's headers are read: the admitter
// takes the values as given, and a batch's jobs carry the same headers as
// single submissions.
func requestOf(queue string, payload []byte, get func(string) string, natsDoor bool) (*admit.Request, *admit.Error) {
	req := &admit.Request{
		Queue:          queue,
		Payload:        payload,
		Keys:           get,
		NoPeer:         natsDoor,
		IdempotencyKey: get(spillway.HeaderIdempotencyKey),
		Trace:          traceHeaders(get),
	}
	if natsDoor && req.IdempotencyKey == "" {
		req.IdempotencyKey = get(spillway.HeaderMsgID)
	}
	var bad *admit.Error
	if req.Cost, bad = parseCost(get(spillway.HeaderCost)); bad != nil {
		return nil, bad
	}
	if req.Priority, bad = parsePriority(get(spillway.HeaderPriority)); bad != nil {
		return nil, bad
	}
	if req.Schedule, bad = parseSchedule(get); bad != nil {
		return nil, bad
	}
	if req.Schedule.Debounce, req.DebounceKey, bad = parseDebounce(get, req.Schedule); bad != nil {
		return nil, bad
	}
	return req, nil
}

// parseCost reads Spillway-Cost: empty means 1.
func parseCost(s string) (int64, *admit.Error) {
	if s == "" {
		return 1, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 1 {
		return 0, &admit.Error{Type: spillway.ProblemBadCost, Field: spillway.HeaderCost,
			Detail: fmt.Sprintf("%s %.40q: want an integer ≥ 1", spillway.HeaderCost, s)}
	}
	return n, nil
}

// parsePriority reads Spillway-Priority, in any case: empty means normal.
func parsePriority(s string) (spillway.Priority, *admit.Error) {
	p, err := spillway.ParsePriority(s)
	if err != nil {
		return p, &admit.Error{Type: spillway.ProblemBadPriority, Field: spillway.HeaderPriority,
			Detail: fmt.Sprintf("%s %.40q: want high, normal or low", spillway.HeaderPriority, s)}
	}
	return p, nil
}

// parseSchedule reads Spillway-Not-Before, Spillway-Delay and
// Spillway-Max-Wait. A malformed value, a negative duration, both start
// headers at once, or a delay longer than the max-wait (no retry would
// ever fit) is a bad request naming the header. Bounds that depend on the
// queue (backlog.max_delay, backlog.max_age) are the admitter's.
func parseSchedule(get func(string) string) (admit.Schedule, *admit.Error) {
	var s admit.Schedule
	bad := func(header, format string, args ...any) (admit.Schedule, *admit.Error) {
		return admit.Schedule{}, &admit.Error{Type: spillway.ProblemBadRequest, Field: header, Detail: header + " " + fmt.Sprintf(format, args...)}
	}
	nb, delay, wait := get(spillway.HeaderNotBefore), get(spillway.HeaderDelay), get(spillway.HeaderMaxWait)
	if nb != "" && delay != "" {
		return bad(spillway.HeaderDelay, "%.40q: give %s or %s, not both", delay, spillway.HeaderNotBefore, spillway.HeaderDelay)
	}
	var err error
	if nb != "" {
		if s.NotBefore, err = time.Parse(time.RFC3339Nano, nb); err != nil {
			return bad(spillway.HeaderNotBefore, "%.40q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", nb)
		}
	}
	if delay != "" {
		if s.Delay, err = time.ParseDuration(delay); err != nil || s.Delay < 0 {
			return bad(spillway.HeaderDelay, "%.40q: want a duration ≥ 0 such as 10m or 1h30m", delay)
		}
	}
	if wait != "" {
		w, err := time.ParseDuration(wait)
		if err != nil || w < 0 {
			return bad(spillway.HeaderMaxWait, "%.40q: want a duration ≥ 0 such as 30s or 5m", wait)
		}
		if s.Delay > w {
			return bad(spillway.HeaderMaxWait, "%s is shorter than %s %s: the job could never start in time", w, spillway.HeaderDelay, s.Delay)
		}
		s.MaxWait = &w
	}
	return s, nil
}

// parseDebounce reads Spillway-Debounce and Spillway-Debounce-Key, given
// the schedule parseSchedule read (docs/design.md#debounce). A malformed
// or non-positive debounce, one beside Spillway-Not-Before or
// Spillway-Delay (a debounce is the job's delay), one longer than the
// max-wait, or a debounce key without a debounce is a bad request naming
// the header. The bounds that depend on the queue (backlog.max_delay,
// backlog.max_age) are the admitter's, as for Spillway-Delay.
func parseDebounce(get func(string) string, s admit.Schedule) (time.Duration, string, *admit.Error) {
	bad := func(header, format string, args ...any) (time.Duration, string, *admit.Error) {
		return 0, "", &admit.Error{Type: spillway.ProblemBadRequest, Field: header, Detail: header + " " + fmt.Sprintf(format, args...)}
	}
	v, key := get(spillway.HeaderDebounce), get(spillway.HeaderDebounceKey)
	if v == "" {
		if key != "" {
			return bad(spillway.HeaderDebounceKey, "%.40q: it names a debounced job's group; send it with %s", key, spillway.HeaderDebounce)
		}
		return 0, "", nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return bad(spillway.HeaderDebounce, "%.40q: want a duration > 0 such as 500ms, 1s or 5m", v)
	}
	if !s.NotBefore.IsZero() || s.Delay > 0 {
		return bad(spillway.HeaderDebounce, "%.40q: a debounced job waits its debounce; give %s or %s / %s, not both",
			v, spillway.HeaderDebounce, spillway.HeaderNotBefore, spillway.HeaderDelay)
	}
	if s.MaxWait != nil && d > *s.MaxWait {
		return bad(spillway.HeaderMaxWait, "%s is shorter than %s %s: the job could never start in time", *s.MaxWait, spillway.HeaderDebounce, d)
	}
	return d, key, nil
}

// scheduleHeader reports whether field is one of the headers
// parseSchedule and parseDebounce read (its errors name the header).
func scheduleHeader(field string) bool {
	switch field {
	case spillway.HeaderNotBefore, spillway.HeaderDelay, spillway.HeaderMaxWait, spillway.HeaderDebounce, spillway.HeaderDebounceKey:
		return true
	}
	return false
}

// traceHeaders keeps W3C trace context to carry with the job. As the
// W3C Trace Context recommendation says of values that cannot be parsed,
// an invalid traceparent is ignored, and tracestate with it; a tracestate
// that is too long or holds a character other than printable ASCII (or a
// tab) is ignored alone. The submission is taken either way: a trace is
// the producer's aid, never a reason to refuse its job — and no value
// that NATS headers cannot carry reaches the job's message.
//
// The names are asked in canonical form, as every door's get finds them
// in any case: http.Header.Get canonicalizes a name it is given in
// another, a new string on every submission.
func traceHeaders(get func(string) string) nats.Header {
	parent := get("Traceparent")
	if !validTraceparent(parent) {
		return nil
	}
	h := nats.Header{}
	h.Set("traceparent", parent)
	if state := get("Tracestate"); state != "" && validTracestate(state) {
		h.Set("tracestate", state)
	}
	return h
}

// maxTracestate bounds a kept tracestate, in bytes (the recommendation's
// 32 list members of at most 256 bytes are longer, but vendors are asked
// to keep theirs under 512).
const maxTracestate = 512

// validTraceparent reports whether s is a traceparent of the W3C Trace
// Context: version-traceid-parentid-flags in lower-case hex, the ids not
// all zeros, version ff refused; a later version may append "-" and more
// (kept as sent, printable ASCII only).
func validTraceparent(s string) bool {
	const n = len("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if len(s) < n || len(s) > maxTracestate {
		return false
	}
	hex := func(f string) bool {
		for _, c := range []byte(f) {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
		return true
	}
	zero := func(f string) bool { return strings.Trim(f, "0") == "" }
	version, trace, parent, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if s[2] != '-' || s[35] != '-' || s[52] != '-' || !hex(version) || !hex(trace) || !hex(parent) || !hex(flags) ||
		version == "ff" || zero(trace) || zero(parent) {
		return false
	}
	if len(s) == n {
		return true
	}
	if version == "00" || s[n] != '-' {
		return false
	}
	for _, c := range []byte(s[n:]) {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// validTracestate reports whether s can be carried as tracestate: at most
// maxTracestate bytes of printable ASCII, spaces and tabs (the list's
// optional white space).
func validTracestate(s string) bool {
	if len(s) > maxTracestate {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
}

// titleOf is the title of a problem document of type t that requestOf
// or a batch's reading found.
func titleOf(t string) string {
	switch t {
	case spillway.ProblemBadCost:
		return "Bad cost"
	case spillway.ProblemBadPriority:
		return "Bad priority"
	case spillway.ProblemBadRequest:
		return "Bad request"
	case spillway.ProblemTooLarge:
		return "Payload too large"
	}
	return http.StatusText(statusOf(t))
}
