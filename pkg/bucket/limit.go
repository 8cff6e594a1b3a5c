package bucket

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidLimit is wrapped by every error that reports a bad limit, rate,
// window or cost. Use errors.As with *LimitError to learn which field.
var ErrInvalidLimit = errors.New("bucket: invalid limit")

// LimitError names the field of a limit that is wrong and why.
type LimitError struct {
	Field  string // "rate", "burst", "delay", "limit", "window", "algorithm", "cost"
	Value  string // the offending value as given
	Reason string // what was expected
	// Want, when set, describes what the field should hold for a reader
	// who left it out ("a rate such as \"10/s\""): a configuration loader
	// reports "missing: expected " + Want when its file does not give Field.
	Want string
}

func (e *LimitError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("bucket: invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("bucket: invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidLimit) true.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

func limitErr(field, value, reason string, args ...any) error {
	return &LimitError{Field: field, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// wantErr sets the Want of a *LimitError.
func wantErr(err error, want string) error {
	var le *LimitError
	if errors.As(err, &le) {
		le.Want = want
	}
	return err
}

// Algorithm selects how a limit decides. The zero value is LeakyBucket.
type Algorithm uint8

// The five admission algorithms of docs/design.md#algorithms.
const (
	LeakyBucket Algorithm = iota
	TokenBucket
	FixedWindow
	SlidingLog
	SlidingWindow
)

var algorithmNames = [...]string{"leaky_bucket", "token_bucket", "fixed_window", "sliding_log", "sliding_window"}

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm turns a configuration name ("leaky_bucket", ...) into an
// Algorithm. The empty string means LeakyBucket, the default.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return LeakyBucket, nil
	}
	for i, name := range algorithmNames {
		if s == name {
			return Algorithm(i), nil
		}
	}
	return 0, limitErr("algorithm", s, "want one of %s", strings.Join(algorithmNames[:], ", "))
}

// Rate is Count units per Per. "10/s" is Rate{10, time.Second}.
type Rate struct {
	Count int64
	Per   time.Duration
}

func (r Rate) String() string {
	switch r.Per {
	case time.Second:
		return strconv.FormatInt(r.Count, 10) + "/s"
	case time.Minute:
		return strconv.FormatInt(r.Count, 10) + "/m"
	case time.Hour:
		return strconv.FormatInt(r.Count, 10) + "/h"
	}
	return strconv.FormatInt(r.Count, 10) + "/" + r.Per.String()
}

// ParseRate parses "N/s", "N/m", "N/h", "N/ms", nginx's "Nr/s", or "N/<Go
// duration>" such as "5/10s". N is a positive integer.
func ParseRate(s string) (Rate, error) {
	num, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, limitErr("rate", s, "want COUNT/UNIT such as 10/s, 600/m, 1/h or 5/10s")
	}
	num = strings.TrimSuffix(num, "r") // nginx writes 10r/s
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return Rate{}, limitErr("rate", s, "count %q must be a positive integer", num)
	}
	var d time.Duration
	switch per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	case "ms":
		d = time.Millisecond
	default:
		d, err = time.ParseDuration(per)
		if err != nil || d <= 0 {
			return Rate{}, limitErr("rate", s, "unit %q is not s, m, h, ms or a positive Go duration such as 10s", per)
		}
	}
	return Rate{Count: n, Per: d}, nil
}

// maxExact is 2^53: every scaled quantity of a limit stays below it so that
// the Redis Lua scripts, whose numbers are doubles, compute exactly what the
// Go code computes.
const maxExact = int64(1) << 53

// maxWindow bounds windows so that the Lua scripts can reduce a Unix
// nanosecond time modulo the window exactly.
const maxWindow = 240 * time.Hour

// maxCount bounds limits of the window algorithms (two counts share a word in
// the memory store).
const maxCount = 1<<31 - 1

// MaxTiers is the most tiers one decision may combine.
const MaxTiers = 8

// Limit is one validated limit tier: an algorithm and its parameters. Build
// it with Spec.Build or the constructors NewLeakyBucket, NewTokenBucket,
// NewFixedWindow, NewSlidingLog and NewSlidingWindow; the zero Limit is not
// valid and every store refuses it with ErrInvalidLimit. A Limit is a small
// immutable value, safe to copy and share.
type Limit struct {
	alg   Algorithm
	valid bool
	rate  Rate
	// Rate reduced to lowest terms: amount units per period nanoseconds.
	amount, period int64
	burst, delay   int64
	count          int64 // L of the window algorithms
	window         int64 // W in nanoseconds
}

// Algorithm reports the limit's algorithm.
func (l Limit) Algorithm() Algorithm { return l.alg }

// Rate reports the rate of a leaky or token bucket (zero for windows).
func (l Limit) Rate() Rate { return l.rate }

// Burst reports the burst of a leaky bucket or the capacity of a token bucket.
func (l Limit) Burst() int64 { return l.burst }

// Delay reports the delay of a leaky bucket.
func (l Limit) Delay() int64 { return l.delay }

// Count reports the limit L of a window algorithm.
func (l Limit) Count() int64 { return l.count }

// Window reports the window W of a window algorithm.
func (l Limit) Window() time.Duration { return time.Duration(l.window) }

// Scaled reports the rate of a leaky or token bucket in lowest terms: amount
// units per period nanoseconds. The algorithms keep a bucket's level scaled
// by period, so one nanosecond drains amount and one job unit weighs period;
// stores outside this package (redisbucket) compute with these two numbers.
func (l Limit) Scaled() (amount, period int64) { return l.amount, l.period }

// Valid reports whether l was built by a constructor that accepted it.
func (l Limit) Valid() bool { return l.valid }

// Quota is the number of units the limit grants per Policy window: the burst
// (plus the one request in service) for buckets, L for windows. It is what
// the RateLimit-Policy header announces as its quota.
func (l Limit) Quota() int64 {
	switch l.alg {
	case LeakyBucket:
		return l.burst + 1
	case TokenBucket:
		return l.burst
	}
	return l.count
}

// PolicyWindow is the window the quota refers to: the time a bucket needs to
// drain its quota at its rate, or W.
func (l Limit) PolicyWindow() time.Duration {
	switch l.alg {
	case LeakyBucket, TokenBucket:
		return time.Duration(ceilDiv(l.Quota()*l.period, l.amount))
	}
	return time.Duration(l.window)
}

func (l Limit) String() string {
	switch l.alg {
	case LeakyBucket:
		return fmt.Sprintf("leaky_bucket rate=%s burst=%d delay=%d", l.rate, l.burst, l.delay)
	case TokenBucket:
		return fmt.Sprintf("token_bucket rate=%s burst=%d", l.rate, l.burst)
	}
	return fmt.Sprintf("%s limit=%d window=%s", l.alg, l.count, time.Duration(l.window))
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func newRateLimit(alg Algorithm, r Rate, burst int64) (Limit, error) {
	if r.Count <= 0 || r.Per <= 0 {
		return Limit{}, limitErr("rate", r.String(), "count and period must be positive")
	}
	if burst < 0 {
		return Limit{}, limitErr("burst", strconv.FormatInt(burst, 10), "must be ≥ 0")
	}
	g := gcd(r.Count, int64(r.Per))
	l := Limit{alg: alg, rate: r, amount: r.Count / g, period: int64(r.Per) / g, burst: burst}
	// Scaled quantities reach (2·burst+2)·period; keep them exact in doubles.
	if burst >= maxExact/2/l.period-1 {
		return Limit{}, limitErr("burst", strconv.FormatInt(burst, 10),
			"too large for rate %s: burst × (period/gcd) must stay below 2^52 (%d here); lower the burst or use a finer rate such as %d/s",
			r, maxExact/2/l.period-2, max(1, r.Count*int64(time.Second)/int64(r.Per)))
	}
	return l, nil
}

// NewLeakyBucket returns nginx limit_req semantics: rate r, burst b, delay d
// (0 ≤ d ≤ b; nodelay is d = b).
func NewLeakyBucket(r Rate, burst, delay int64) (Limit, error) {
	l, err := newRateLimit(LeakyBucket, r, burst)
	if err != nil {
		return Limit{}, err
	}
	if delay < 0 || delay > burst {
		return Limit{}, limitErr("delay", strconv.FormatInt(delay, 10), "must be between 0 and burst (%d)", burst)
	}
	l.delay = delay
	l.valid = true
	return l, nil
}

// NewTokenBucket returns a token bucket of capacity burst (≥ 1) refilled at r.
func NewTokenBucket(r Rate, burst int64) (Limit, error) {
	if burst < 1 {
		return Limit{}, wantErr(limitErr("burst", strconv.FormatInt(burst, 10), "a token bucket's capacity must be ≥ 1"),
			"the token bucket's capacity, an integer ≥ 1")
	}
	l, err := newRateLimit(TokenBucket, r, burst)
	if err != nil {
		return Limit{}, err
	}
	l.valid = true
	return l, nil
}

func newWindowLimit(alg Algorithm, limit int64, window time.Duration) (Limit, error) {
	if limit < 1 || limit > maxCount {
		return Limit{}, wantErr(limitErr("limit", strconv.FormatInt(limit, 10), "must be between 1 and %d", maxCount),
			fmt.Sprintf("an integer from 1 to %d, the units allowed per window", maxCount))
	}
	if window <= 0 || window > maxWindow {
		return Limit{}, limitErr("window", window.String(), "must be positive and at most %s", maxWindow)
	}
	return Limit{alg: alg, valid: true, count: limit, window: int64(window)}, nil
}

// NewFixedWindow admits at most limit units per window aligned to the Unix
// epoch.
func NewFixedWindow(limit int64, window time.Duration) (Limit, error) {
	return newWindowLimit(FixedWindow, limit, window)
}

// maxLogLimit bounds a sliding log, which keeps one entry per admitted job.
const maxLogLimit = 1_000_000

// NewSlidingLog admits at most limit units in any window ending now, keeping
// the times of admitted jobs. Its memory grows with limit (≤ 1,000,000).
func NewSlidingLog(limit int64, window time.Duration) (Limit, error) {
	if limit > maxLogLimit {
		return Limit{}, limitErr("limit", strconv.FormatInt(limit, 10),
			"a sliding_log keeps one entry per admitted job: at most %d; use sliding_window for larger limits", maxLogLimit)
	}
	return newWindowLimit(SlidingLog, limit, window)
}

// NewSlidingWindow is the sliding-window counter: the previous window's
// count weighted by the part of it still inside the sliding window.
func NewSlidingWindow(limit int64, window time.Duration) (Limit, error) {
	l, err := newWindowLimit(SlidingWindow, limit, window)
	if err != nil {
		return Limit{}, err
	}
	if limit >= maxExact/int64(window) {
		return Limit{}, limitErr("limit", strconv.FormatInt(limit, 10),
			"limit × window (ns) must stay below 2^53 for window %s: at most %d", window, maxExact/int64(window)-1)
	}
	return l, nil
}

// Spec is a limit as written in configuration or on a command line: strings
// where people write units. Spec.Build validates it.
type Spec struct {
	Algorithm string // default leaky_bucket
	Rate      string // "10/s"; leaky_bucket, token_bucket
	Burst     int64  // leaky_bucket (default 0), token_bucket (capacity, required)
	Delay     int64  // leaky_bucket, 0 ≤ delay ≤ burst (default 0, like nginx)
	NoDelay   bool   // leaky_bucket: delay = burst
	Limit     int64  // window algorithms: L
	Window    string // window algorithms: a Go duration such as 60s
}

// Build validates the spec and returns the Limit. The error is a *LimitError naming the field.
func (s Spec) Build() (Limit, error) {
	alg, err := ParseAlgorithm(s.Algorithm)
	if err != nil {
		return Limit{}, err
	}
	switch alg {
	case LeakyBucket, TokenBucket:
		if s.Rate == "" {
			return Limit{}, wantErr(limitErr("rate", "", "%s needs a rate such as 10/s", alg), `a rate such as "10/s"`)
		}
		if s.Window != "" {
			return Limit{}, limitErr("window", s.Window, "%s takes rate and burst, not limit and window", alg)
		}
		if s.Limit != 0 {
			return Limit{}, limitErr("limit", strconv.FormatInt(s.Limit, 10), "%s takes rate and burst, not limit and window", alg)
		}
		r, err := ParseRate(s.Rate)
		if err != nil {
			return Limit{}, err
		}
		if alg == TokenBucket {
			if s.Delay != 0 || s.NoDelay {
				return Limit{}, limitErr("delay", strconv.FormatInt(s.Delay, 10), "token_bucket has no delay")
			}
			return NewTokenBucket(r, s.Burst)
		}
		delay := s.Delay
		if s.NoDelay {
			if s.Delay != 0 {
				return Limit{}, limitErr("delay", strconv.FormatInt(s.Delay, 10), "give delay or nodelay, not both")
			}
			delay = s.Burst
		}
		return NewLeakyBucket(r, s.Burst, delay)
	default:
		// Name the field that does not belong, so that a file's loader
		// can point at it.
		for _, f := range []struct {
			name string
			set  bool
		}{{"rate", s.Rate != ""}, {"burst", s.Burst != 0}, {"delay", s.Delay != 0}, {"nodelay", s.NoDelay}} {
			if f.set {
				return Limit{}, limitErr(f.name, "", "%s takes limit and window, not %s", alg, f.name)
			}
		}
		if s.Window == "" {
			return Limit{}, wantErr(limitErr("window", "", "%s needs a window such as 60s", alg), `a Go duration such as "1s" or "5m"`)
		}
		w, err := time.ParseDuration(s.Window)
		if err != nil {
			return Limit{}, limitErr("window", s.Window, "want a Go duration such as 1s, 60s or 1h")
		}
		switch alg {
		case FixedWindow:
			return NewFixedWindow(s.Limit, w)
		case SlidingLog:
			return NewSlidingLog(s.Limit, w)
		default:
			return NewSlidingWindow(s.Limit, w)
		}
	}
}
