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
// failure mode says (docs/design.md#failure-modes): open admits, closed refuses with
// ErrStoreUnavailable, local decides in a memory store of this process at
// the same limits.
//
// After a failure the shared store is left alone for a backoff (100ms,
// doubling to 500ms) so that an unreachable Redis costs nothing per request;
// then one request probes it, and the first success ends the outage.
// Safe for concurrent use.
type Failover struct {
	primary bucket.Store
	now     func() time.Time

	// OnError, if set, is called for every failed decision of the primary.
	OnError func(err error)
	// OnFallback, if set, is called for every decision taken by the
	// failure mode instead of the primary.
	OnFallback func(mode config.FailureMode)

	mu sync.Mutex
	// mode is the failure mode (SetMode changes it at a reload); local is
	// the memory store of FailLocal, or of every decision without a
	// primary, made when first needed and kept, so that a decision it
	// took can be refunded after the mode changed.
	mode     config.FailureMode
	local    *bucket.Memory
	downTill time.Time // zero: primary up
	backoff  time.Duration
	probing  bool
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// NewFailover wraps primary with a failure mode ("" is open). A nil
// primary means there is no shared store; Decide then uses local only
// (and mode is irrelevant).
func NewFailover(primary bucket.Store, mode config.FailureMode) (*Failover, error) {
	f := &Failover{primary: primary, now: time.Now}
	if primary == nil {
		m, err := bucket.NewMemory()
		if err != nil {
			return nil, err
		}
		f.local = m
	}
	if err := f.SetMode(mode); err != nil {
		return nil, err
	}
	return f, nil
}

// SetMode changes the failure mode ("" is open), as a reload of
// redis.failure_mode does: decisions from then on, Mode and the
// admitter's readiness follow it. A change to local while the shared
// store is down starts the local store empty.
func (f *Failover) SetMode(mode config.FailureMode) error {
	switch mode {
	case "":
		mode = config.FailOpen
	case config.FailOpen, config.FailClosed, config.FailLocal:
	default:
		return fmt.Errorf("admit: unknown failure mode %q: want open, closed or local", mode)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if mode == config.FailLocal && f.local == nil {
		m, err := bucket.NewMemory()
		if err != nil {
			return err
		}
		f.local = m
	}
	f.mode = mode
	return nil
}

// state is the failure mode and the local store, read together.
func (f *Failover) state() (config.FailureMode, *bucket.Memory) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mode, f.local
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
func (f *Failover) Mode() config.FailureMode {
	mode, _ := f.state()
	return mode
}

// Source says which store took a decision.
type Source uint8

// Sources of a decision.
const (
	FromPrimary Source = iota // the configured store (Redis, or memory without redis.url)
	FromLocal                 // failure mode local: this process's memory store
	FromOpen                  // failure mode open: admitted without a store
	FromClosed                // failure mode closed: refused
)

// Decide decides as bucket.Store does. A decision's refund
// (bucket.Decision.Refund) goes to the store that made it, the primary or
// the local one; a failure-mode-open decision took nothing.
func (f *Failover) Decide(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	d, _, err := f.DecideFrom(ctx, group, tiers, cost)
	return d, err
}

// DecideFrom is Decide that also says which store decided.
func (f *Failover) DecideFrom(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, Source, error) {
	if f.primary == nil {
		_, local := f.state()
		d, err := local.Decide(ctx, group, tiers, cost)
		return d, FromPrimary, err
	}
	return viaPrimary(ctx, f,
		func() (bucket.Decision, error) { return f.primary.Decide(ctx, group, tiers, cost) },
		func() (bucket.Decision, Source, error) { return f.fallback(ctx, group, tiers, cost) })
}

// viaPrimary asks the primary store while it is up, and fallback while it
// is down or when the primary fails with an outage (which marks it down);
// an error of the caller's own is returned as it is.
func viaPrimary[T any](ctx context.Context, f *Failover, primary func() (T, error), fallback func() (T, Source, error)) (T, Source, error) {
	if !f.usePrimary() {
		return fallback()
	}
	v, err := primary()
	if err == nil {
		f.up()
		return v, FromPrimary, nil
	}
	if isRequestError(err) || ctx.Err() != nil {
		// The caller's fault or the caller gave up: not an outage.
		f.endProbe()
		return v, FromPrimary, err
	}
	f.down()
	if f.OnError != nil {
		f.OnError(err)
	}
	return fallback()
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
	mode, local := f.state()
	if f.OnFallback != nil {
		f.OnFallback(mode)
	}
	switch mode {
	case config.FailLocal:
		d, err := local.Decide(ctx, group, tiers, cost)
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
