package redisbucket

import (
	"context"
	_ "embed" // the script
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

//go:embed settle.lua
var luaSettle string

// settleScript settles the cost of one decision's consumed tiers.
var settleScript = redis.NewScript(luaLib + luaSettle)

// Settle settles the cost of decision d, which this store made, at actual
// units in its consumed tiers (see bucket.Store.Settle; d.Settle(ctx,
// actual) calls it), in one run of settle.lua at Redis TIME (or the
// injected clock) under the same keys and hash tag as Decide: on a
// Cluster, one run per hash tag, each at the time its tiers were decided.
// A decision with Consumed 0, or an actual cost equal to the decided one,
// needs no round trip. Like a refund, a settle is not idempotent: the
// caller settles a job once.
func (s *Store) Settle(ctx context.Context, d bucket.Decision, actual int64) error {
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
		return fmt.Errorf("redisbucket: %w (nothing settled)", err)
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var reqs []refundRequest
	if s.splitTiers {
		reqs = s.splitRequests(group, tiers, cost, d)
	} else {
		keys, arg := s.encodeRefund(group, tiers, cost, d)
		reqs = []refundRequest{{keys: keys, blob: arg}}
	}
	var errs []error
	for _, r := range reqs {
		blob := appendNum(r.blob, actual)
		status, err := s.runScript(ctx, settleScript, r.keys, blob).Int64()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("redisbucket: settle: %w", err))
		case status == 0:
		case status < 1 || int(status) > len(r.keys):
			errs = append(errs, errMalformed)
		default:
			errs = append(errs, fmt.Errorf("%w: key %q (not settled)", ErrForeignData, r.keys[status-1]))
		}
	}
	return errors.Join(errs...)
}

// splitRequests lays out a settle on a Cluster: one run per hash tag, as
// refundSplit lays out a refund.
func (s *Store) splitRequests(group string, tiers []bucket.Tier, cost int64, d bucket.Decision) []refundRequest {
	var reqs []refundRequest
	done := uint8(0)
	for i := range tiers {
		bit := uint8(1) << uint(i)
		if d.Consumed&bit == 0 || done&bit != 0 {
			continue
		}
		t := tag(group, tiers[i].Key)
		var keys []string
		var lims []bucket.Limit
		for j := i; j < len(tiers); j++ {
			if b := uint8(1) << uint(j); d.Consumed&b != 0 && done&b == 0 && tag(group, tiers[j].Key) == t {
				done |= b
				keys = append(keys, s.key(group, tiers[j].Limit.Algorithm(), tiers[j].Key))
				lims = append(lims, tiers[j].Limit)
			}
		}
		at := d.At
		if d.TierAt[i] != 0 {
			at = time.Unix(0, d.TierAt[i])
		}
		k, blob := s.refundArgs(keys, lims, min(cost, 1<<53), at.Unix(), int64(at.Nanosecond()), 1<<uint(len(keys))-1)
		reqs = append(reqs, refundRequest{keys: k, blob: blob})
	}
	return reqs
}
