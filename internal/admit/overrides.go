package admit

import (
	"slices"
	"sync"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// Per-key overrides (docs/design.md#per-key-overrides): the configuration
// the admitter runs is the file's with the runtime overrides merged into
// its tiers' and its concurrency entries' override tables, rebuilt on a reload and on each change of
// the runtime overrides, so that a submission reads both in one atomic
// load of the configuration.

// overrideState is what the configuration in use is built from.
type overrideState struct {
	mu      sync.Mutex
	base    *config.Config
	runtime []overrides.Record
}

// setConfig makes cfg the configuration, with the runtime overrides.
func (a *Admitter) setConfig(cfg *config.Config) {
	a.over.mu.Lock()
	defer a.over.mu.Unlock()
	a.over.base = cfg
	a.cfg.Store(a.withRuntime(cfg, a.over.runtime))
}

// SetRuntimeOverrides replaces the runtime overrides (the admin API's,
// from overrides.Watcher). A record whose queue or tier the
// configuration lacks, or whose parameters the tier's algorithm refuses,
// is left out and logged; it applies again once a reload brings its tier
// back.
func (a *Admitter) SetRuntimeOverrides(records []overrides.Record) {
	a.over.mu.Lock()
	defer a.over.mu.Unlock()
	a.over.runtime = slices.Clone(records)
	a.cfg.Store(a.withRuntime(a.over.base, a.over.runtime))
}

// withRuntime is base with records merged into its tiers' and its
// concurrency entries' overrides; base itself when there are none.
func (a *Admitter) withRuntime(base *config.Config, records []overrides.Record) *config.Config {
	if len(records) == 0 {
		return base
	}
	byTarget := map[overrides.Target][]overrides.Override{}
	for _, r := range records {
		o, found, err := runtimeOf(base, r)
		switch {
		case !found:
			a.o.Logger.Warn("admit: a runtime override names a tier or concurrency entry the configuration lacks; ignoring it", "queue", r.Queue, "of", r.String(), "key_hash", queue.KeyHash(r.Key))
		case err != nil:
			a.o.Logger.Warn("admit: a runtime override does not fit its tier or concurrency entry; ignoring it", "queue", r.Queue, "of", r.String(), "key_hash", queue.KeyHash(r.Key), "err", err)
		default:
			byTarget[r.Target] = append(byTarget[r.Target], o)
		}
	}
	if len(byTarget) == 0 {
		return base
	}
	c := *base
	c.Queues = slices.Clone(base.Queues)
	for qi := range c.Queues {
		q := &c.Queues[qi]
		q.Limits = slices.Clone(q.Limits)
		for li := range q.Limits {
			l := &q.Limits[li]
			if rt := byTarget[overrides.Target{Queue: q.Name, Tier: l.Name}]; len(rt) > 0 {
				l.Overrides = overrides.NewTable(l.Overrides.List(), rt)
			}
		}
		q.Concurrency = slices.Clone(q.Concurrency)
		for ci := range q.Concurrency {
			cc := &q.Concurrency[ci]
			if rt := byTarget[overrides.Target{Queue: q.Name, Concurrency: cc.Name}]; len(rt) > 0 {
				cc.Overrides = overrides.NewTable(cc.Overrides.List(), rt)
			}
		}
	}
	return &c
}

// runtimeOf is record r as an override of the tier or concurrency entry
// of cfg it names; found is false when cfg has no such one.
func runtimeOf(cfg *config.Config, r overrides.Record) (_ overrides.Override, found bool, _ error) {
	q := cfg.Queue(r.Queue)
	if q == nil {
		return overrides.Override{}, false, nil
	}
	if r.Concurrency != "" {
		i := slices.IndexFunc(q.Concurrency, func(c config.Concurrency) bool { return c.Name == r.Concurrency })
		if i < 0 {
			return overrides.Override{}, false, nil
		}
		o, err := RuntimeConcurrencyOverride(q.Concurrency[i], r)
		return o, true, err
	}
	i := slices.IndexFunc(q.Limits, func(l config.Limit) bool { return l.Name == r.Tier })
	if i < 0 {
		return overrides.Override{}, false, nil
	}
	o, err := RuntimeOverride(q.Limits[i], r)
	return o, true, err
}

// RuntimeOverride is record r as an override of tier l: its parameters
// built with the tier's algorithm, by the rules of the tier's own.
func RuntimeOverride(l config.Limit, r overrides.Record) (overrides.Override, error) {
	p, err := overrides.ParsePattern(r.Key)
	if err != nil {
		return overrides.Override{}, err
	}
	lim, err := overrides.Build(r.Params, l.Limit.Algorithm())
	if err != nil {
		return overrides.Override{}, err
	}
	return overrides.Override{Pattern: p, Params: r.Params, Limit: lim, Source: overrides.SourceRuntime, By: r.By, At: r.At}, nil
}

// tierOf is tier i of a queue, l, for client key k: its bucket key and
// the limit k gets, an override's if one matches k. An overridden key's
// bucket key carries the override's parameters (BucketSuffix), so a key
// whose limit changes starts a fresh bucket under the new limit; a key
// without one keeps the tier's bucket key.
func tierOf(i int, l config.Limit, k string) bucket.Tier {
	t := bucket.Tier{Key: tierKey(i, k), Limit: l.Limit}
	if o := l.Overrides.Match(k); o != nil {
		t.Key += o.BucketSuffix()
		t.Limit = o.Limit
	}
	return t
}
