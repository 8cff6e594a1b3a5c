package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// Settle settles the cost of decision d, which this store made, at actual
// units in its consumed tiers (see bucket.Store.Settle; d.Settle(ctx,
// actual) calls it), in one run of settle.lua at Redis TIME (or the
// injected clock) under the same keys and hash tag as Decide: on a
// Cluster, one run per hash tag, each at the time its tiers were decided,
// in one pipeline. A decision with Consumed 0, or an actual cost equal to
// the decided one, needs no round trip. Like a refund, a settle is not
// idempotent: the caller settles a job once.
func (s *Store) Settle(ctx context.Context, d bucket.Decision, actual int64) error {
	return s.settle(ctx, d, actual, "settle")
}

// settle is Settle and, at actual 0, Refund; op names it in errors.
func (s *Store) settle(ctx context.Context, d bucket.Decision, actual int64, op string) error {
	if err := bucket.CheckSettle(s, d, actual); err != nil {
		return fmt.Errorf("redisbucket: %w", err)
	}
	group, tiers, cost := d.Request()
	if s.client == nil {
		return errors.New("redisbucket: the Store was not built with New")
	}
	if strings.ContainsAny(group, "{}") {
		return fmt.Errorf("%w %q: it must not hold '{' or '}'", ErrInvalidGroup, group)
	}
	if d.Consumed == 0 || actual == cost {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisbucket: %w (nothing %sed)", err, op)
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if s.splitTiers {
		return s.runSettles(ctx, s.splitSettles(group, tiers, cost, d, actual), op)
	}
	keys, arg := s.encodeSettle(group, tiers, cost, d, actual)
	return s.runSettles(ctx, []settleRequest{{keys: keys, blob: arg}}, op)
}
