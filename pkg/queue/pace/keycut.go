package pace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// keyCutHoldoff: a key's pushback cuts an adaptive leak again only once
// the last cut is this old, so that the answers of the key's jobs started
// before its pause (the same overload) cut it once.
const keyCutHoldoff = DefaultPushbackPause

// Cut cuts an adaptive leak's rate as a pushback does (LeakState), without
// pausing the leak: for a queue whose pushback pauses only the key pushed
// back (queue.PushbackKey), whose other keys go on at the cut rate. It
// does nothing for a leak that is not adaptive, nor within keyCutHoldoff
// of the last cut, nor while the leak is paused.
func (p *YieldingPacer) Cut(ctx context.Context) error {
	if !p.adaptive.Load() {
		return nil
	}
	maxRate := *p.maxRate.Load()
	floor := LeakFloor(maxRate)
	cut := func(st LeakState, now time.Time) (LeakState, bool) {
		if st.PausedUntil.After(now) || (!st.CutAt.IsZero() && now.Sub(st.CutAt) < keyCutHoldoff) {
			return st, false
		}
		rate := st.Rate(now, maxRate, true)
		st.CutAt, st.From, st.To = now, rate, max(floor, mulDiv(rate, leakCutNum, leakCutDen))
		return st, true
	}
	if p.kv == nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.state, _ = cut(p.state, p.now())
		return nil
	}
	for {
		st, rev, err := loadLeak(ctx, p.kv, p.key)
		if err != nil {
			return err
		}
		now := p.now()
		next, ok := cut(st, now)
		if !ok {
			p.remember(st, now)
			return nil
		}
		if rev == 0 {
			_, err = p.kv.Create(ctx, p.key, next.encode())
		} else {
			_, err = p.kv.Update(ctx, p.key, next.encode(), rev)
		}
		switch {
		case err == nil:
			p.remember(next, now)
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Another worker wrote it since we read: read again.
		default:
			return fmt.Errorf("pace: leak state %s: %w", p.key, err)
		}
	}
}
