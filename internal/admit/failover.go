package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// ErrStoreUnavailable: the shared bucket store cannot be reached and the
// failure mode is closed. The front doors answer 503 with Retry-After.
var ErrStoreUnavailable = errors.New("admit: bucket store unavailable")

// Failover decides in the shared store and, while it fails, as the
// failure mode says (DESIGN §3): open admits, closed refuses with
// ErrStoreUnavailable, local decides in a memory store of this process at
// the same limits.
//
// After a failure the shared store is left alone for a backoff (100ms,
// doubling to 2s) so that an unreachable Redis costs nothing per request;
// then one request probes it, and the first success ends the outage.
// Safe for concurrent use.
type Failover struct {
	primary bucket.Store
	local   *bucket.Memory // FailLocal only
	mode    config.FailureMode
	now     func() time.Time

	// OnError, if set, is called for every failed decision of the primary.
	OnError func(err error)
	// OnFallback, if set, is called for every decision taken by the
	// failure mode instead of the primary.
	OnFallback func(mode config.FailureMode)

	mu       sync.Mutex
	downTill time.Time // zero: primary up
	backoff  time.Duration
	probing  bool
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// NewFailover wraps primary with a failure mode. A nil primary means
// there is no shared store; Decide then uses local only (and mode is
// irrelevant).
func NewFailover(primary bucket.Store, mode config.FailureMode) (*Failover, error) {
	f := &Failover{primary: primary, mode: mode, now: time.Now}
	switch mode {
	case config.FailOpen, config.FailClosed:
	case config.FailLocal, "":
		if mode == "" {
			f.mode = config.FailOpen
		}
	default:
		return nil, fmt.Errorf("admit: unknown failure mode %q: want open, closed or local", mode)
	}
	if mode == config.FailLocal || primary == nil {
		m, err := bucket.NewMemory()
		if err != nil {
			return nil, err
		}
		f.local = m
	}
	return f, nil
}

// Down reports whether the shared store is considered unreachable now,
// and how long until the next probe.
func (f *Failover) Down() (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.downTill.IsZero() {
		return false, 0
	}
	return true, max(0, f.downTill.Sub(f.now()))
}

// Mode is the failure mode decisions take while the shared store is down.
func (f *Failover) Mode() config.FailureMode { return f.mode }

// Source says which store took a decision.
type Source uint8

// Sources of a decision.
const (
	FromPrimary Source = iota // the configured store (Redis, or memory without redis.url)
	FromLocal                 // failure mode local: this process's memory store
	FromOpen                  // failure mode open: admitted without a store
	FromClosed                // failure mode closed: refused
)

// Decide decides as bucket.Store does (Failover is not a Store itself:
// its Refund needs to know which store decided).
func (f *Failover) Decide(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	d, _, err := f.DecideFrom(ctx, group, tiers, cost)
	return d, err
}

// DecideFrom is Decide that also says which store decided.
func (f *Failover) DecideFrom(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, Source, error) {
	if f.primary == nil {
		d, err := f.local.Decide(ctx, group, tiers, cost)
		return d, FromPrimary, err
	}
	if !f.usePrimary() {
		return f.fallback(ctx, group, tiers, cost)
	}
	d, err := f.primary.Decide(ctx, group, tiers, cost)
	if err == nil {
		f.up()
		return d, FromPrimary, nil
	}
	if isRequestError(err) || ctx.Err() != nil {
		// The caller's fault or the caller gave up: not an outage.
		f.endProbe()
		return d, FromPrimary, err
	}
	f.down()
	if f.OnError != nil {
		f.OnError(err)
	}
	return f.fallback(ctx, group, tiers, cost)
}

// isRequestError: the store refused the request itself, which says
// nothing about its health.
func isRequestError(err error) bool {
	return errors.Is(err, bucket.ErrInvalidCost) || errors.Is(err, bucket.ErrInvalidLimit) ||
		errors.Is(err, bucket.ErrTooManyTiers) || errors.Is(err, bucket.ErrDuplicateKey)
}

func (f *Failover) usePrimary() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.downTill.IsZero() {
		return true
	}
	if f.probing || f.now().Before(f.downTill) {
		return false
	}
	f.probing = true
	return true
}

func (f *Failover) up() {
	f.mu.Lock()
	f.downTill, f.backoff, f.probing = time.Time{}, 0, false
	f.mu.Unlock()
}

func (f *Failover) endProbe() {
	f.mu.Lock()
	f.probing = false
	f.mu.Unlock()
}

func (f *Failover) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probing = false
	switch {
	case f.backoff == 0:
		f.backoff = minBackoff
	case f.downTill.IsZero() || !f.now().Before(f.downTill):
		f.backoff = min(2*f.backoff, maxBackoff)
	}
	f.downTill = f.now().Add(f.backoff)
}

func (f *Failover) fallback(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, Source, error) {
	if f.OnFallback != nil {
		f.OnFallback(f.mode)
	}
	switch f.mode {
	case config.FailLocal:
		d, err := f.local.Decide(ctx, group, tiers, cost)
		return d, FromLocal, err
	case config.FailClosed:
		_, wait := f.Down()
		return bucket.Decision{RetryAfter: max(wait, minBackoff)}, FromClosed, ErrStoreUnavailable
	default: // open
		if err := bucket.CheckRequest(tiers, cost); err != nil {
			return bucket.Decision{}, FromOpen, err
		}
		now := f.now()
		return bucket.Decision{Verdict: bucket.Admitted, At: now, NotBefore: now}, FromOpen, nil
	}
}

// Refund gives back the units a decision took, in the store that took it
// (nothing for a failure-mode-open decision, which took none).
func (f *Failover) Refund(ctx context.Context, src Source, group string, tiers []bucket.Tier, cost int64, d bucket.Decision) error {
	var s bucket.Store
	switch src {
	case FromPrimary:
		s = f.primary
		if s == nil {
			s = f.local
		}
	case FromLocal:
		s = f.local
	default:
		return nil
	}
	return s.Refund(ctx, group, tiers, cost, d)
}
