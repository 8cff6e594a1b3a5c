package config

import (
	"fmt"

	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/internal/yamlpos"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// Concurrency is one of a queue's per-key concurrency bounds (an item of
// concurrency:): at most Max jobs of one key run at once, across all
// workers (docs/design.md#per-key-concurrency). Its key is read from a
// job's request as a limit tier's is; the admitter stamps the job with
// the entry's name, its key's max and its key's token
// (queue.HeaderConcurrencyKey).
type Concurrency struct {
	// Name names the entry in the job's stamp, the slots' state and the
	// admin API; unique in the queue.
	Name string
	// Key is where a job's key comes from, as for limit tiers. A job whose
	// request lacks the header (or, on the NATS door, an ip entry's
	// address) is not bounded by the entry.
	Key Key
	// Max is how many jobs of one key run at once (1 to
	// queue.MaxConcurrency).
	Max int
	// Overrides give some keys another max (each Override's Max): the
	// exact key's, else the longest matching prefix's, resolved by the
	// same table as a tier's. The admitter merges the runtime overrides
	// into it (a runtime override replaces the file's of its pattern).
	Overrides *overrides.Table
}

// MaxOf is the max of key: its override's, else the entry's.
func (c Concurrency) MaxOf(key string) int {
	if o := c.Overrides.Match(key); o != nil {
		return o.Max
	}
	return c.Max
}

const wantConcurrencyName = `a name of 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'`

type (
	// concurrencyDoc is an item of a queue's concurrency.
	concurrencyDoc struct {
		Name      text                      `yaml:"name"`
		Key       text                      `yaml:"key"`
		Max       integer                   `yaml:"max"`
		Overrides []*concurrencyOverrideDoc `yaml:"overrides" list:"overrides"`
	}
	// concurrencyOverrideDoc is one of an entry's overrides: a key or
	// prefix and its max.
	concurrencyOverrideDoc struct {
		Key text    `yaml:"key"`
		Max integer `yaml:"max"`
	}
)

func checkConcurrencyName(s string) error {
	if !queue.ValidConcurrencyName(s) {
		return expected(wantConcurrencyName, s)
	}
	return nil
}

// concurrency reads a queue's concurrency entries.
func (d *decoder) concurrency(list []*concurrencyDoc) []Concurrency {
	var out []Concurrency
	named := map[string]*concurrencyDoc{}
	for _, cd := range list {
		if cd == nil || !d.placed(cd) {
			continue
		}
		var c Concurrency
		ok := true
		if d.need(&cd.Name, wantConcurrencyName) && d.str(&cd.Name, &c.Name, checkConcurrencyName) {
			if first, dup := named[c.Name]; dup {
				d.errorf(&cd.Name, "concurrency name %q is already given at line %d", c.Name, first.Name.n.Line)
				ok = false
			}
			named[c.Name] = cd
		} else {
			ok = false
		}
		var s string
		if d.need(&cd.Key, wantKey) && d.str(&cd.Key, &s, nil) {
			k, err := parseKey(s)
			if err != nil {
				d.errorf(&cd.Key, "%v", err)
				ok = false
			}
			c.Key = k
		} else {
			ok = false
		}
		if n, mok := d.concurrencyMax(&cd.Max); mok {
			c.Max = n
		} else {
			ok = false
		}
		if len(cd.Overrides) > 0 && c.Key.Kind == KeyGlobal && cd.Key.given() {
			d.errorf(&cd.Overrides, "a global entry has one key, which its own max bounds: overrides apply to header:NAME and ip entries")
			ok = false
		}
		seen := map[overrides.Pattern]int{} // → line
		var list []overrides.Override
		for _, o := range cd.Overrides {
			if o == nil || !d.placed(o) {
				ok = false
				continue
			}
			r := overrides.Override{Source: overrides.SourceConfig, Line: d.pos[o].line}
			if d.need(&o.Key, wantPattern) && d.str(&o.Key, &s, nil) {
				p, err := overrides.ParsePattern(s)
				switch line, dup := seen[p]; {
				case err != nil:
					d.errorf(&o.Key, "%v", err)
					ok = false
				case dup:
					d.errorf(&o.Key, "key %.80q is already overridden at line %d", s, line)
					ok = false
				default:
					seen[p] = o.Key.n.Line
				}
				r.Pattern = p
			} else {
				ok = false
			}
			if n, mok := d.concurrencyMax(&o.Max); mok {
				r.Max = n
			} else {
				ok = false
			}
			list = append(list, r)
		}
		c.Overrides = overrides.NewTable(list)
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// concurrencyMax reads a max: required, an integer from 1 to
// queue.MaxConcurrency.
func (d *decoder) concurrencyMax(i *integer) (int, bool) {
	if !d.need(i, fmt.Sprintf("an integer from 1 to %d: how many jobs of one key run at once", queue.MaxConcurrency)) {
		return 0, false
	}
	if i.notInt || i.V < 1 || i.V > queue.MaxConcurrency {
		d.errorf(i, "expected %s, got %s", intRange(1, queue.MaxConcurrency), yamlpos.Describe(i.n))
		return 0, false
	}
	return int(i.V), true
}
