package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// MaxRetryAfter caps the delay a downstream may ask for with Retry-After.
// The queue's retry policy caps it further (retry.max, default 5m); this cap
// only keeps an absurd value (a date years ahead) from meaning anything.
const MaxRetryAfter = time.Hour

// maxDrain is how much of a response body is read before closing it.
const maxDrain = 64 << 10

var (
	// ErrInvalidConfig is wrapped by the error for a handler config that
	// cannot be used.
	ErrInvalidConfig = errors.New("handler: invalid config")
	// ErrNoHandler: the Config sets none of http, nats and log.
	// Callers name the queue: fmt.Errorf("queue %s: %w", name, err).
	ErrNoHandler = errors.New("handler: no handler configured")
)

// New returns the handler cfg names. nc is needed by a NATS handler only,
// client by an HTTP handler only (nil: see HTTP), logger by the log handler
// only (nil: slog.Default()).
func New(cfg Config, nc *nats.Conn, client *http.Client, logger *slog.Logger) (worker.Handler, error) {
	set := 0
	for _, on := range []bool{cfg.HTTP != nil, cfg.NATS != nil, cfg.Log} {
		if on {
			set++
		}
	}
	switch {
	case set == 0:
		return nil, ErrNoHandler
	case set > 1:
		return nil, fmt.Errorf("%w: more than one of http, nats and log is set", ErrInvalidConfig)
	case cfg.HTTP != nil:
		return HTTP(*cfg.HTTP, client)
	case cfg.NATS != nil:
		return NATS(nc, *cfg.NATS)
	default:
		return Log(logger), nil
	}
}

// Log returns a handler that logs each job at Info — id, queue, attempt,
// payload size and the key's token (queue.KeyToken), never the key — and
// succeeds. It is the dev-mode demo queue's handler. A nil logger means
// slog.Default().
func Log(logger *slog.Logger) worker.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, j *queue.Job) error {
		attrs := []slog.Attr{
			slog.String("job_id", j.ID),
			slog.String("queue", j.Queue),
			slog.Int("attempt", j.Attempt),
			slog.Int("payload_bytes", len(j.Payload)),
		}
		if j.Key != "" {
			attrs = append(attrs, slog.String("key_token", queue.KeyToken(j.Key)))
		}
		logger.LogAttrs(ctx, slog.LevelInfo, "job", attrs...)
		return nil
	}
}

// forwarded are the job headers passed on downstream, lower-cased: trace
// context and the payload's type. Others (such as the header a limit tier
// keys on, which may hold an API key) stay inside Spillway.
var forwarded = map[string]bool{"traceparent": true, "tracestate": true, "content-type": true}

// jobHeaders calls set for every header a job is sent with: the forwarded
// job headers first, then Spillway's own, so that those cannot be overridden.
// nats.Header is case-sensitive, so the job's names are matched ignoring case.
func jobHeaders(j *queue.Job, set func(name, value string)) {
	for name, vs := range j.Header {
		if len(vs) > 0 && forwarded[strings.ToLower(name)] {
			set(http.CanonicalHeaderKey(name), vs[0])
		}
	}
	set(spillway.HeaderJobID, j.ID)
	set(spillway.HeaderQueue, j.Queue)
	if validHeaderValue(j.Key) {
		set(spillway.HeaderKey, j.Key)
	} else {
		set(spillway.HeaderKey, url.PathEscape(j.Key))
		set(spillway.HeaderKeyEncoding, "percent")
	}
	set(spillway.HeaderAttempt, strconv.Itoa(j.Attempt))
	set(spillway.HeaderIdempotencyKey, j.ID)
}

// validHeaderValue reports whether v can be sent as an HTTP or NATS header
// value as it is: no control characters but tab (RFC 9110 field-value), and
// valid UTF-8 so that a NATS header stays text.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(v)
}

// parseRetryAfter reads a Retry-After value — delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3) — as a delay from now, capped at MaxRetryAfter.
// A date is measured from date (the answer's Date header) when that parses,
// so that a downstream whose clock is off by minutes is still understood.
func parseRetryAfter(v, date string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(MaxRetryAfter/time.Second) { // overflow: far too long anyway
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d, err := http.ParseTime(strings.TrimSpace(date)); err == nil {
		now = d
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
