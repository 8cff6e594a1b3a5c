package retry

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidPolicy is wrapped by every error of Policy.Validate.
var ErrInvalidPolicy = errors.New("retry: invalid policy")

// Defaults of a Policy's zero fields, as in docs/design.md#retries.
const (
	DefaultMaxAttempts = 5
	DefaultInitial     = time.Second
	DefaultMax         = 5 * time.Minute
	DefaultJitter      = 0.2
)

// Policy is a retry schedule. The zero value is valid: every zero field
// takes its default.
type Policy struct {
	// MaxAttempts is how many times a job is tried in all, the first
	// included (default 5). 1 means never retry.
	MaxAttempts int
	// Initial is the delay after the first failure (default 1s).
	Initial time.Duration
	// Max caps every delay (default 5m).
	Max time.Duration
	// Jitter is the fraction of a delay that Next may take off at random,
	// 0 to 1 (default 0.2: a delay of 10s becomes 8s to 10s). Negative
	// means no jitter.
	Jitter float64
}

// withDefaults fills zero fields.
func (p Policy) withDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.Initial == 0 {
		p.Initial = DefaultInitial
	}
	if p.Max == 0 {
		p.Max = DefaultMax
	}
	if p.Jitter == 0 {
		p.Jitter = DefaultJitter
	}
	if p.Jitter < 0 {
		p.Jitter = 0
	}
	return p
}

// Attempts is how many times a job is tried in all: MaxAttempts, or its
// default.
func (p Policy) Attempts() int { return p.withDefaults().MaxAttempts }

// Validate reports every field that cannot be used, naming it: the
// problems of ValidateGiven once the zero fields hold their defaults.
func (p Policy) Validate() error { return p.withDefaults().ValidateGiven() }

// FieldError is one field of a Policy that cannot be used. It wraps
// ErrInvalidPolicy.
type FieldError struct {
	// Field is the field's name in a configuration file: max_attempts,
	// initial, max or jitter.
	Field string
	Value string // the value found
	Want  string // what was expected: "an integer ≥ 1", "at most max"
	// Other names the field whose value bounds this one ("max"), and
	// OtherValue is that value; both are empty when the field is wrong on
	// its own.
	Other, OtherValue string
}

func (e *FieldError) Error() string {
	if e.Other != "" {
		return fmt.Sprintf("%v: %s %s is longer than %s %s", ErrInvalidPolicy, e.Field, e.Value, e.Other, e.OtherValue)
	}
	return fmt.Sprintf("%v: %s %s: expected %s", ErrInvalidPolicy, e.Field, e.Value, e.Want)
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) true.
func (e *FieldError) Unwrap() error { return ErrInvalidPolicy }

// ValidateGiven is Validate for a Policy whose every field is given, such
// as one a configuration file's loader filled with the defaults itself:
// zero is not read as the default, and Jitter must be from 0 to 1. It
// reports every problem, each a *FieldError, in the order of a
// configuration file's fields (errors.Join).
func (p Policy) ValidateGiven() error {
	var errs []error
	bad := func(field string, value any, want string) {
		errs = append(errs, &FieldError{Field: field, Value: fmt.Sprint(value), Want: want})
	}
	if p.MaxAttempts < 1 {
		bad("max_attempts", p.MaxAttempts, "an integer ≥ 1")
	}
	if p.Initial <= 0 {
		bad("initial", p.Initial, "a positive duration")
	}
	if p.Max <= 0 {
		bad("max", p.Max, "a positive duration")
	}
	if p.Initial > 0 && p.Max > 0 && p.Initial > p.Max {
		errs = append(errs, &FieldError{Field: "initial", Value: p.Initial.String(), Want: "at most max",
			Other: "max", OtherValue: p.Max.String()})
	}
	if !(p.Jitter >= 0 && p.Jitter <= 1) {
		bad("jitter", p.Jitter, "a number from 0 to 1")
	}
	return errors.Join(errs...)
}

// Delay is the exact, unjittered delay after the given failed attempt
// (counting from 1): Initial·2^(attempt−1), capped at Max. Attempts below 1
// count as 1.
func (p Policy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	shift := max(0, attempt-1)
	if shift >= 62 || p.Initial > p.Max>>shift {
		return p.Max
	}
	return p.Initial << shift
}

// Source is the random source Next draws jitter from; *math/rand/v2.Rand
// satisfies it. It need not be safe for concurrent use if the caller's use
// is not concurrent.
type Source interface {
	Int64N(n int64) int64
}

// Verdict is what Next decides.
type Verdict uint8

const (
	// Retry: try the job again after Decision.Delay.
	Retry Verdict = iota
	// Dead: send the job to the dead-letter stream.
	Dead
)

func (v Verdict) String() string {
	if v == Dead {
		return "dead"
	}
	return "retry"
}

// Decision is Next's answer.
type Decision struct {
	Verdict Verdict
	Delay   time.Duration // for Retry
	// Reason says why a job is dead: "permanent error" or "attempts
	// exhausted (5 of 5)"; empty for Retry.
	Reason string
}

// Next decides after the given attempt (counting from 1) failed with err.
// rnd supplies the jitter; nil means none.
func (p Policy) Next(attempt int, err error, rnd Source) Decision {
	p = p.withDefaults()
	if IsPermanent(err) {
		return Decision{Verdict: Dead, Reason: "permanent error"}
	}
	if attempt >= p.MaxAttempts {
		return Decision{Verdict: Dead, Reason: fmt.Sprintf("attempts exhausted (%d of %d)", attempt, p.MaxAttempts)}
	}
	d := p.Delay(attempt)
	if span := int64(float64(d) * p.Jitter); rnd != nil && span > 0 {
		d -= time.Duration(rnd.Int64N(span + 1))
	}
	if after, ok := RetryAfter(err); ok && after > d {
		d = min(after, p.Max)
	}
	return Decision{Verdict: Retry, Delay: d}
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix: Next sends the job to
// the dead-letter stream at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// afterError carries the delay a downstream asked for.
type afterError struct {
	err   error
	delay time.Duration
}

func (e *afterError) Error() string { return fmt.Sprintf("%v (retry after %v)", e.err, e.delay) }
func (e *afterError) Unwrap() error { return e.err }

// After marks err with the delay the downstream asked for (an HTTP
// Retry-After): Next waits at least that long, but never longer than the
// policy's Max. After(nil, d) is nil.
func After(err error, delay time.Duration) error {
	if err == nil {
		return nil
	}
	return &afterError{err: err, delay: delay}
}

// RetryAfter returns the delay After attached to err, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var a *afterError
	if errors.As(err, &a) {
		return a.delay, true
	}
	return 0, false
}

// pushbackError marks an error as the downstream saying it is overloaded.
type pushbackError struct {
	err   error
	after time.Duration
}

func (e *pushbackError) Error() string { return e.err.Error() }
func (e *pushbackError) Unwrap() error { return e.err }

// Pushback marks err as the downstream pushing back — an HTTP 429 or 503,
// a NATS reply with Spillway-Status: busy — asking for no more work until
// after has passed (0: it did not say). A worker then pauses its queue's
// backlog leak for every worker (docs/design.md#pushback). With after > 0
// the job itself also retries no sooner than after, as with After (unless
// err already carries a delay of After's). The error's text is err's.
// Pushback(nil, d) is nil.
func Pushback(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	if _, has := RetryAfter(err); !has && after > 0 {
		err = After(err, after)
	}
	return &pushbackError{err: err, after: max(after, 0)}
}

// IsPushback reports whether err, or an error it wraps, was marked by
// Pushback, and the delay the downstream asked for (0 if it did not say).
func IsPushback(err error) (after time.Duration, ok bool) {
	var p *pushbackError
	if errors.As(err, &p) {
		return p.after, true
	}
	return 0, false
}
