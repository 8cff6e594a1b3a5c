package pace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/kvwatch"
)

// A queue's fairness weights in force (docs/design.md#fair-drain) are one
// entry of the pacers' bucket, WeightsKey, that the admitters write when
// they load their configuration and at every reload (PublishWeights), and
// that every worker follows (Weights): the drain's leader weighs each flow
// by the weights in force when it picks it, so a change reaches the jobs
// that wait in the backlog, not only later ones.

// WeightsKey is the key of a queue's fairness weights in the pacers'
// bucket (PacerBucket).
func WeightsKey(q string) string { return q + ".weights" }

// weightRule is a queue.WeightRule as the entry keeps it.
type weightRule struct {
	Key    string `json:"key"`
	Prefix bool   `json:"prefix,omitempty"`
	Weight int    `json:"weight"`
}

// weightsDoc is a WeightsKey entry's value.
type weightsDoc struct {
	Weights []weightRule `json:"weights"`
}

// EncodeWeights is the entry's value for rules: JSON
// {"weights": [{"key": "tenant-", "prefix": true, "weight": 3}, …]}.
func EncodeWeights(rules []queue.WeightRule) []byte {
	doc := weightsDoc{Weights: make([]weightRule, 0, len(rules))}
	for _, r := range rules {
		doc.Weights = append(doc.Weights, weightRule{Key: r.Key, Prefix: r.Prefix, Weight: r.Weight})
	}
	b, _ := json.Marshal(doc) // plain strings, bools and ints: cannot fail
	return b
}

// DecodeWeights reads an entry's value into rules, in the order
// queue.Fairness.WeightOf wants (exact keys first, then prefixes from the
// longest). A rule whose weight is out of range (1 to queue.MaxWeight) is
// an error: the entry is not used.
func DecodeWeights(b []byte) ([]queue.WeightRule, error) {
	var doc weightsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("pace: weights: %w", err)
	}
	rules := make([]queue.WeightRule, 0, len(doc.Weights))
	for _, r := range doc.Weights {
		if r.Weight < 1 || r.Weight > queue.MaxWeight {
			return nil, fmt.Errorf("pace: weights: key %q: weight %d: want 1 to %d", r.Key, r.Weight, queue.MaxWeight)
		}
		rules = append(rules, queue.WeightRule{KeyPattern: queue.KeyPattern{Key: r.Key, Prefix: r.Prefix}, Weight: r.Weight})
	}
	slices.SortStableFunc(rules, func(a, b queue.WeightRule) int {
		switch {
		case a.Prefix != b.Prefix && a.Prefix:
			return 1
		case a.Prefix != b.Prefix:
			return -1
		case a.Prefix:
			return len(b.Key) - len(a.Key)
		}
		return 0
	})
	return rules, nil
}

// PublishWeights writes queue q's fairness weights in force to kv, the
// pacers' bucket (OpenPacerBucket); it writes nothing when the entry holds
// them already.
func PublishWeights(ctx context.Context, kv jetstream.KeyValue, q string, rules []queue.WeightRule) error {
	val := EncodeWeights(rules)
	e, err := kv.Get(ctx, WeightsKey(q))
	switch {
	case err == nil && string(e.Value()) == string(val):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("pace: weights of %s: %w", q, err)
	}
	if _, err := kv.Put(ctx, WeightsKey(q), val); err != nil {
		return fmt.Errorf("pace: weights of %s: %w", q, err)
	}
	return nil
}

// Weights follows a queue's fairness weights in force (WeightsKey). Until
// the entry is read, and while it does not exist, the fallback given to
// NewWeights applies (the worker's own configuration) if it has rules;
// with neither, there are no weights in force and the weight stamped on
// each job counts (WeightOf's ok is false). Safe for concurrent use; a nil
// *Weights has no weights in force.
//
// The runtime rules (RuntimeWeightsKey) are followed too, and apply over
// whichever configuration rules are in force (MergeWeights).
type Weights struct {
	mu       sync.Mutex
	fallback queue.Fairness
	rules    *queue.Fairness    // the entry's, nil when there is none
	runtime  []queue.WeightRule // the runtime entry's
	merged   *queue.Fairness    // rules (or fallback) with runtime, when runtime has rules
}

// NewWeights returns a Weights that gives fallback's weights until Run
// reads the entry.
func NewWeights(fallback queue.Fairness) *Weights {
	return &Weights{fallback: fallback}
}

// WeightOf is key's weight under the weights in force
// (queue.Fairness.WeightOf); ok is false when none are (no entry, and no
// fallback rules): the job's stamped weight counts.
func (w *Weights) WeightOf(key string) (weight int, ok bool) {
	if w == nil {
		return 1, false
	}
	w.mu.Lock()
	if w.merged != nil {
		f := *w.merged
		w.mu.Unlock()
		return f.WeightOf(key), true
	}
	f := w.fallback
	if w.rules != nil {
		f = *w.rules
	} else if len(f.Weights) == 0 {
		w.mu.Unlock()
		return 1, false
	}
	w.mu.Unlock()
	return f.WeightOf(key), true
}

// Run follows queue q's entry in kv until ctx ends, watching again after
// a failure; while the watch is broken the last weights hold.
// The runtime rules' entry is followed alike, on a goroutine of its own
// that Run waits for.
func (w *Weights) Run(ctx context.Context, kv jetstream.KeyValue, q string, log *slog.Logger) {
	var wg sync.WaitGroup
	wg.Go(func() { w.runRuntime(ctx, kv, q, log) })
	defer wg.Wait()
	kvwatch.Run(ctx, kv, WeightsKey(q), nil, log, "the queue's fairness weights", func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			w.setRules(nil) // removed: the worker's own weights again
			return
		}
		rules, err := DecodeWeights(e.Value())
		if err != nil {
			log.Warn("the queue's fairness weights entry is unreadable; the weights in force stay", "error", err)
			return
		}
		w.setRules(&queue.Fairness{Weights: rules})
	})
}

// setRules makes rules the configuration's rules in force (nil: the
// fallback's).
func (w *Weights) setRules(rules *queue.Fairness) {
	w.mu.Lock()
	w.rules = rules
	w.mergeLocked()
	w.mu.Unlock()
}
