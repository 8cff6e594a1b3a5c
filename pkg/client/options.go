package client

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds one attempt of a call.
	DefaultTimeout = 10 * time.Second
	// DefaultRetries is how many times a submission that got no answer,
	// or a 503, is sent again.
	DefaultRetries = 2
	// DefaultBackoff is the wait before the first retry; each next one
	// doubles, up to a second, less up to a fifth at random.
	DefaultBackoff = 100 * time.Millisecond
	// DefaultPollInterval is how often Wait reads a job's status.
	DefaultPollInterval = 250 * time.Millisecond
)

// Option configures a Client.
type Option func(*config) error

type config struct {
	apiKey     string
	httpClient *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	poll       time.Duration
	noAutoKeys bool
	httpGiven  bool
}

func newConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout, retries: DefaultRetries, backoff: DefaultBackoff, poll: DefaultPollInterval}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithAPIKey sends key as Authorization: Bearer KEY, on either door: the
// admitter's API keys (http.api_keys_file, http.admin_keys_file) name the
// caller on the NATS door too, and a job can be read and cancelled only
// by the key that submitted it, or by an admin key.
func WithAPIKey(key string) Option {
	return func(c *config) error {
		if key == "" || strings.ContainsAny(key, "\r\n") {
			return fmt.Errorf("%w: WithAPIKey: want a key of one line, not empty", ErrInvalidOption)
		}
		c.apiKey = key
		return nil
	}
}

// WithHTTPClient sends the HTTP door's requests with hc (default: a
// client of its own over http.DefaultTransport). Its Timeout, if any,
// bounds every request as well as WithTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return fmt.Errorf("%w: WithHTTPClient: nil client", ErrInvalidOption)
		}
		c.httpClient, c.httpGiven = hc, true
		return nil
	}
}

// WithTimeout bounds each attempt of a call (default DefaultTimeout); the
// call's context bounds all of them.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithTimeout %v: want a positive duration", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithRetries sets how many times a submission (single or batch) that got
// no answer, or a 503, is sent again (default DefaultRetries; 0: never),
// waiting backoff before the first retry and twice as long before each
// next one, up to a second (default DefaultBackoff). A retry reuses the
// submission's idempotency key, so a job that was taken though its answer
// was lost is answered as a duplicate, never taken twice. A submission
// without an idempotency key (WithoutIdempotencyKeys) is retried only
// when the admitter answered 503, which takes nothing.
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *config) error {
		if n < 0 || n > 100 {
			return fmt.Errorf("%w: WithRetries %d: want 0 to 100", ErrInvalidOption, n)
		}
		if backoff < 0 {
			return fmt.Errorf("%w: WithRetries backoff %v: want 0 or more", ErrInvalidOption, backoff)
		}
		c.retries, c.backoff = n, backoff
		return nil
	}
}

// WithPollInterval sets how often Wait reads a job's status (default
// DefaultPollInterval), on either door.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithPollInterval %v: want a positive duration", ErrInvalidOption, d)
		}
		c.poll = d
		return nil
	}
}

// WithoutIdempotencyKeys stops the client from generating an idempotency
// key for each submission: only those given WithIdempotencyKey carry one.
// The admitter then does no idempotency bookkeeping for the others (a
// load generator measures the plain path), and the client does not retry
// them after a lost answer, which could take them twice.
func WithoutIdempotencyKeys() Option {
	return func(c *config) error {
		c.noAutoKeys = true
		return nil
	}
}

// SubmitOption describes one submission: its headers and schedule. The
// options are applied in order; a later one of the same header wins.
type SubmitOption func(*submission)

// submission is one job's headers as the doors read them, in the order
// set, with the canonical name of each.
type submission struct {
	headers [][2]string
	key     string
	keySet  bool
	err     error
}

func (s *submission) set(name, value string) {
	for i := range s.headers {
		if strings.EqualFold(s.headers[i][0], name) {
			s.headers[i][1] = value
			return
		}
	}
	s.headers = append(s.headers, [2]string{name, value})
}

func (s *submission) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithHeader sends a header with the job: a key header the queue's
// limits key on (header:NAME tiers, such as X-Api-Key or X-Tenant), W3C
// traceparent and tracestate, or any Spillway-* header this package has
// no option for.
func WithHeader(name, value string) SubmitOption {
	return func(s *submission) {
		if !spillway.IsToken(name) {
			s.fail("WithHeader %.64q: not a valid header name", name)
			return
		}
		if strings.ContainsAny(value, "\r\n") {
			s.fail("WithHeader %s: a value with a line break", name)
			return
		}
		if strings.EqualFold(name, spillway.HeaderIdempotencyKey) {
			s.key, s.keySet = value, true
			return
		}
		s.set(name, value)
	}
}

// WithCost sends Spillway-Cost: the units the job takes from its limits
// (default 1 at the admitter).
func WithCost(n int64) SubmitOption {
	return func(s *submission) {
		if n < 1 {
			s.fail("WithCost %d: want 1 or more", n)
			return
		}
		s.set(spillway.HeaderCost, strconv.FormatInt(n, 10))
	}
}

// WithIdempotencyKey sends key as Idempotency-Key instead of the
// generated one: a second submission with the same key, within the
// queue's duplicate window, is answered with the first one's answer and
// takes nothing. An empty key sends none.
func WithIdempotencyKey(key string) SubmitOption {
	return func(s *submission) {
		if strings.ContainsAny(key, "\r\n") {
			s.fail("WithIdempotencyKey: a key with a line break")
			return
		}
		s.key, s.keySet = key, true
	}
}

// WithPriority sends Spillway-Priority: the job's class in the backlog's
// drain (spillway.High, spillway.Normal, spillway.Low). It orders the
// drain only; the limits decide the same whatever the class.
func WithPriority(p spillway.Priority) SubmitOption {
	return func(s *submission) {
		if !p.Valid() {
			s.fail("WithPriority %d: want spillway.High, spillway.Normal or spillway.Low", p)
			return
		}
		s.set(spillway.HeaderPriority, p.String())
	}
}

// WithNotBefore sends Spillway-Not-Before: the job starts no earlier
// than t (within the queue's backlog.max_delay).
func WithNotBefore(t time.Time) SubmitOption {
	return func(s *submission) { s.set(spillway.HeaderNotBefore, t.UTC().Format(time.RFC3339Nano)) }
}

// WithDelay sends Spillway-Delay: the job starts no earlier than d from
// its admission.
func WithDelay(d time.Duration) SubmitOption {
	return func(s *submission) {
		if d < 0 {
			s.fail("WithDelay %v: want 0 or more", d)
			return
		}
		s.set(spillway.HeaderDelay, d.String())
	}
}

// WithMaxWait sends Spillway-Max-Wait: the admitter refuses the job
// (ErrWaitTooLong) if it would start later than d from now, and a queued
// job that has not started within d expires.
func WithMaxWait(d time.Duration) SubmitOption {
	return func(s *submission) {
		if d <= 0 {
			s.fail("WithMaxWait %v: want a positive duration", d)
			return
		}
		s.set(spillway.HeaderMaxWait, d.String())
	}
}

// WithDebounce sends Spillway-Debounce: the job waits d from its
// admission, and a newer job of its debounce key (WithDebounceKey, else
// its limit key) submitted meanwhile supersedes it: only the newest
// runs, the others end spillway.StateSuperseded. d is at most the
// queue's backlog.max_delay; not with WithNotBefore or WithDelay.
func WithDebounce(d time.Duration) SubmitOption {
	return func(s *submission) {
		if d <= 0 {
			s.fail("WithDebounce %v: want a positive duration", d)
			return
		}
		s.set(spillway.HeaderDebounce, d.String())
	}
}

// WithDebounceKey sends Spillway-Debounce-Key: the group of a debounced
// job (WithDebounce), in place of its limit key. Jobs of one queue and
// one caller with the same debounce key supersede each other.
func WithDebounceKey(k string) SubmitOption {
	return func(s *submission) {
		if k == "" {
			s.fail("WithDebounceKey: want a non-empty key")
			return
		}
		s.set(spillway.HeaderDebounceKey, k)
	}
}

// newSubmission applies opts, and gives the job a generated idempotency
// key unless one was set or auto is false.
func newSubmission(opts []SubmitOption, auto bool) (submission, error) {
	var s submission
	if len(opts) > 0 {
		s.headers = make([][2]string, 0, len(opts)) // most options set one header
	}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.err != nil {
		return s, s.err
	}
	if !s.keySet && auto {
		id, err := uuid.NewV7()
		if err != nil {
			return s, fmt.Errorf("client: an idempotency key: %w", err)
		}
		s.key = id.String()
	}
	return s, nil
}
