package pace

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/kvwatch"
)

// A queue's runtime weight rules, those set through the admin API
// (docs/design.md#fair-drain), are one entry of the pacers' bucket of
// their own, RuntimeWeightsKey, apart from the configuration's
// (WeightsKey): the admin API is its one writer, the admitters' reloads
// never touch it, and every worker follows both entries and weighs keys by
// their union (MergeWeights), a runtime rule replacing the configuration's
// rule of the same pattern. Two admitters with different files thus never
// undo an operator's change, and the change reaches the waiting jobs as a
// reload's does.

// RuntimeWeightsKey is the key of a queue's runtime weight rules in the
// pacers' bucket (PacerBucket). It has one more token than WeightsKey, so
// that no watch of "<queue>.*" sees it.
func RuntimeWeightsKey(q string) string { return q + ".weights.runtime" }

// MaxRuntimeWeights bounds how many runtime weight rules a queue holds,
// which keeps its entry well under a NATS message's size.
const MaxRuntimeWeights = 256

// ErrTooManyWeights is wrapped by SetRuntimeWeight's error when a queue
// has MaxRuntimeWeights runtime rules already and the rule is a new one.
var ErrTooManyWeights = errors.New("pace: too many runtime weight rules")

// RuntimeWeight is one runtime weight rule, with who set it (the
// fingerprint of an admin key) and when.
type RuntimeWeight struct {
	queue.WeightRule
	By string
	At time.Time
}

// runtimeWeightRule is a RuntimeWeight as the entry keeps it.
type runtimeWeightRule struct {
	Key    string    `json:"key"`
	Prefix bool      `json:"prefix,omitempty"`
	Weight int       `json:"weight"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

type runtimeWeightsDoc struct {
	Weights []runtimeWeightRule `json:"weights"`
}

// EncodeRuntimeWeights is the entry's value for rs: JSON {"weights":
// [{"key", "prefix", "weight", "by", "at"}, …]}, ordered by pattern.
func EncodeRuntimeWeights(rs []RuntimeWeight) []byte {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b RuntimeWeight) int { return cmp.Compare(a.String(), b.String()) })
	doc := runtimeWeightsDoc{Weights: make([]runtimeWeightRule, 0, len(rs))}
	for _, r := range rs {
		doc.Weights = append(doc.Weights, runtimeWeightRule{Key: r.Key, Prefix: r.Prefix, Weight: r.Weight, By: r.By, At: r.At.UTC()})
	}
	b, _ := json.Marshal(doc) // strings, bools, ints and times: cannot fail
	return b
}

// DecodeRuntimeWeights reads an entry's value. A rule whose weight is out
// of range (1 to queue.MaxWeight) is an error: the entry is not used.
func DecodeRuntimeWeights(b []byte) ([]RuntimeWeight, error) {
	var doc runtimeWeightsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("pace: runtime weights: %w", err)
	}
	out := make([]RuntimeWeight, 0, len(doc.Weights))
	for _, r := range doc.Weights {
		if r.Weight < 1 || r.Weight > queue.MaxWeight {
			return nil, fmt.Errorf("pace: runtime weights: key %q: weight %d: want 1 to %d", r.Key, r.Weight, queue.MaxWeight)
		}
		out = append(out, RuntimeWeight{WeightRule: queue.WeightRule{KeyPattern: queue.KeyPattern{Key: r.Key, Prefix: r.Prefix}, Weight: r.Weight},
			By: r.By, At: r.At})
	}
	return out, nil
}

// MergeWeights is the rules in force: the union of config's and
// runtime's, a runtime rule replacing config's rule of the same pattern,
// in the order queue.Fairness.WeightOf wants (exact keys first, then
// prefixes from the longest), so that the most specific rule of the union
// wins.
func MergeWeights(config, runtime []queue.WeightRule) []queue.WeightRule {
	out := make([]queue.WeightRule, 0, len(config)+len(runtime))
	for _, r := range config {
		if !slices.ContainsFunc(runtime, func(rt queue.WeightRule) bool { return rt.KeyPattern == r.KeyPattern }) {
			out = append(out, r)
		}
	}
	out = append(out, runtime...)
	slices.SortStableFunc(out, func(a, b queue.WeightRule) int {
		switch {
		case a.Prefix != b.Prefix && a.Prefix:
			return 1
		case a.Prefix != b.Prefix:
			return -1
		case a.Prefix && len(a.Key) != len(b.Key):
			return len(b.Key) - len(a.Key)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}

// rulesOf is the weight rules of rs.
func rulesOf(rs []RuntimeWeight) []queue.WeightRule {
	out := make([]queue.WeightRule, len(rs))
	for i, r := range rs {
		out[i] = r.WeightRule
	}
	return out
}

// ReadRuntimeWeights reads queue q's runtime weight rules from kv, the
// pacers' bucket, ordered by pattern; none when the entry does not exist.
func ReadRuntimeWeights(ctx context.Context, kv jetstream.KeyValue, q string) ([]RuntimeWeight, error) {
	rs, _, err := readRuntimeWeights(ctx, kv, q)
	return rs, err
}

// readRuntimeWeights is ReadRuntimeWeights with the entry's revision (0:
// no entry).
func readRuntimeWeights(ctx context.Context, kv jetstream.KeyValue, q string) ([]RuntimeWeight, uint64, error) {
	e, err := kv.Get(ctx, RuntimeWeightsKey(q))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("pace: runtime weights of %s: %w", q, err)
	}
	rs, err := DecodeRuntimeWeights(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("pace: runtime weights of %s: %w", q, err)
	}
	return rs, e.Revision(), nil
}

// ReadWeights reads the configuration's weight rules that the admitters
// published for queue q (WeightsKey); ok is false when there is no entry.
func ReadWeights(ctx context.Context, kv jetstream.KeyValue, q string) (_ []queue.WeightRule, ok bool, _ error) {
	e, err := kv.Get(ctx, WeightsKey(q))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("pace: weights of %s: %w", q, err)
	}
	rules, err := DecodeWeights(e.Value())
	if err != nil {
		return nil, false, err
	}
	return rules, true, nil
}

// SetRuntimeWeight stores r among queue q's runtime weight rules,
// replacing the rule of the same pattern. Writers of other patterns at the
// same time do not lose each other's rules: each write is conditional on
// the revision it read, and tried again on a conflict.
func SetRuntimeWeight(ctx context.Context, kv jetstream.KeyValue, q string, r RuntimeWeight) error {
	return updateRuntimeWeights(ctx, kv, q, func(rs []RuntimeWeight) ([]RuntimeWeight, error) {
		if i := slices.IndexFunc(rs, func(o RuntimeWeight) bool { return o.KeyPattern == r.KeyPattern }); i >= 0 {
			rs[i] = r
			return rs, nil
		}
		if len(rs) >= MaxRuntimeWeights {
			return nil, fmt.Errorf("%w: queue %s has %d, the most it may hold; remove one first", ErrTooManyWeights, q, len(rs))
		}
		return append(rs, r), nil
	})
}

// DeleteRuntimeWeight removes queue q's runtime weight rule of pattern p;
// found is false when there was none.
func DeleteRuntimeWeight(ctx context.Context, kv jetstream.KeyValue, q string, p queue.KeyPattern) (found bool, _ error) {
	err := updateRuntimeWeights(ctx, kv, q, func(rs []RuntimeWeight) ([]RuntimeWeight, error) {
		n := len(rs)
		rs = slices.DeleteFunc(rs, func(o RuntimeWeight) bool { return o.KeyPattern == p })
		found = len(rs) < n
		return rs, nil
	})
	return found, err
}

// updateRuntimeWeights applies change to queue q's runtime rules and
// writes them at the revision read, trying again while another writer
// came first. An empty result deletes the entry.
func updateRuntimeWeights(ctx context.Context, kv jetstream.KeyValue, q string, change func([]RuntimeWeight) ([]RuntimeWeight, error)) error {
	for {
		rs, rev, err := readRuntimeWeights(ctx, kv, q)
		if err != nil {
			return err
		}
		n := len(rs)
		rs, err = change(rs)
		if err != nil {
			return err
		}
		switch {
		case len(rs) == 0 && n == 0:
			return nil // nothing to delete
		case len(rs) == 0:
			err = kv.Delete(ctx, RuntimeWeightsKey(q), jetstream.LastRevision(rev))
		case rev == 0:
			_, err = kv.Create(ctx, RuntimeWeightsKey(q), EncodeRuntimeWeights(rs))
		default:
			_, err = kv.Update(ctx, RuntimeWeightsKey(q), EncodeRuntimeWeights(rs), rev)
		}
		if err == nil {
			return nil
		}
		if !conflict(err) {
			return fmt.Errorf("pace: runtime weights of %s: %w", q, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pace: runtime weights of %s: %w", q, err)
		}
	}
}

// conflict reports whether err is a conditional write's loss to another
// writer.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// mergeLocked recomputes w.merged; w.mu is held.
func (w *Weights) mergeLocked() {
	if len(w.runtime) == 0 {
		w.merged = nil
		return
	}
	config := w.fallback.Weights
	if w.rules != nil {
		config = w.rules.Weights
	}
	w.merged = &queue.Fairness{Weights: MergeWeights(config, w.runtime)}
}

// setRuntime makes rules the runtime rules in force.
func (w *Weights) setRuntime(rules []queue.WeightRule) {
	w.mu.Lock()
	w.runtime = rules
	w.mergeLocked()
	w.mu.Unlock()
}

// runRuntime follows queue q's runtime rules (RuntimeWeightsKey) until
// ctx ends, watching again after a failure; while the watch is broken the
// last rules hold.
func (w *Weights) runRuntime(ctx context.Context, kv jetstream.KeyValue, q string, log *slog.Logger) {
	kvwatch.Run(ctx, kv, RuntimeWeightsKey(q), nil, log, "the queue's runtime fairness weights", func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			w.setRuntime(nil) // every runtime rule removed
			return
		}
		rs, err := DecodeRuntimeWeights(e.Value())
		if err != nil {
			log.Warn("the queue's runtime fairness weights entry is unreadable; the weights in force stay", "error", err)
			return
		}
		w.setRuntime(rulesOf(rs))
	})
}
