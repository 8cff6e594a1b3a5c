package admit

import (
	"fmt"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// RuntimeConcurrencyOverride is record r as an override of concurrency
// entry c: its max, checked as a file's is (1 to queue.MaxConcurrency).
// A global entry has one key, which its own max bounds: it takes no
// override.
func RuntimeConcurrencyOverride(c config.Concurrency, r overrides.Record) (overrides.Override, error) {
	if c.Key.Kind == config.KeyGlobal {
		return overrides.Override{}, fmt.Errorf("admit: concurrency entry %s is global: it has one key, which its own max bounds", c.Name)
	}
	p, err := overrides.ParsePattern(r.Key)
	if err != nil {
		return overrides.Override{}, err
	}
	if r.Max < 1 || r.Max > queue.MaxConcurrency {
		return overrides.Override{}, fmt.Errorf("admit: max %d: want an integer from 1 to %d: how many jobs of one key run at once", r.Max, queue.MaxConcurrency)
	}
	return overrides.Override{Pattern: p, Max: r.Max, Source: overrides.SourceRuntime, By: r.By, At: r.At}, nil
}
