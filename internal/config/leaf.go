package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/yamlpos"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

// shortForm is a mapping that may be written as a scalar instead.
type shortForm interface {
	short()            // the value is written as a scalar: its first field
	shortWant() string // what the scalar is
}

func (l *leakRateDoc) short() { l.isShort = true }

func (l *leakRateDoc) shortWant() string { return wantRate }

// leaf is a scalar (or a mapping read entry by entry) as the file gives
// it: the node, for the line and the text, and what is wrong with the
// text, which place reports.
type leaf struct {
	n   *yaml.Node // nil when not given
	err error
}

func (l *leaf) base() *leaf { return l }

// leafer is a leaf of the document, by its address.
type leafer interface{ base() *leaf }

var leafType = reflect.TypeFor[leafer]()

// given reports whether the file gives the value (not null).
func (l *leaf) given() bool { return l.n != nil }

// node is t's node, nil for a null item of a list.
func (t *text) node() *yaml.Node {
	if t == nil {
		return nil
	}
	return t.n
}

// text is the value as written, "" when not given.
func (l *leaf) text() string {
	if l.n == nil {
		return ""
	}
	return l.n.Value
}

// into stores the value in dst if it is given and an integer or not.
func (i *integer) into(dst *int64) {
	if i.given() {
		*dst = i.V
	}
}

// into stores the value in dst if it is given and a duration.
func (x *duration) into(dst *time.Duration) {
	if x.given() && x.err == nil {
		*dst = x.V
	}
}

// UnmarshalYAML keeps the node; a null is not given.
func (l *leaf) UnmarshalYAML(n *yaml.Node) error {
	l.n = n
	return nil
}

// scalar reports a value that is not a scalar as not being want.
func (l *leaf) scalar(n *yaml.Node, want string) bool {
	l.n, l.err = n, nil
	if n.Kind != yaml.ScalarNode {
		l.err = fmt.Errorf("expected %s, got %s", want, yamlpos.Describe(n))
	}
	return l.err == nil
}

type (
	// text is a string, read with its check by decoder.str.
	text struct{ leaf }
	// entries is a mapping of names to scalars (headers, weights).
	entries struct{ leaf }
	// integer is an integer as YAML writes it (1_000, 0x10); -1 when it is
	// not one, which every rule refuses with the text as written.
	integer struct {
		leaf
		V      int64
		notInt bool
	}
	duration struct {
		leaf
		V time.Duration
	}
	rate struct {
		leaf
		V bucket.Rate
	}
	boolean struct {
		leaf
		V bool
	}
	// number is a float; NaN when it is not one, refused by its owner.
	number struct {
		leaf
		V float64
	}
	// share is a number or a percentage ("10%").
	share struct{ number }
)

func (i *integer) UnmarshalYAML(n *yaml.Node) error {
	i.n, i.V, i.notInt = n, -1, true
	if v, err := yamlpos.Int(n); err == nil {
		i.V, i.notInt = v, false
	}
	return nil
}

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if d.scalar(n, wantDuration) {
		v, err := time.ParseDuration(n.Value)
		d.V, d.err = v, err
		if err != nil {
			d.err = expected(wantDuration, n.Value)
		}
	}
	return nil
}

func (r *rate) UnmarshalYAML(n *yaml.Node) error {
	if r.scalar(n, wantRate) {
		if r.V, r.err = bucket.ParseRate(n.Value); r.err != nil {
			r.err = expected(wantRate, n.Value)
		}
	}
	return nil
}

func (b *boolean) UnmarshalYAML(n *yaml.Node) error {
	if b.scalar(n, "true or false") {
		switch n.Value {
		case "true", "True", "TRUE":
			b.V = true
		case "false", "False", "FALSE":
		default:
			b.err = expected("true or false", n.Value)
		}
	}
	return nil
}

func (x *number) UnmarshalYAML(n *yaml.Node) error {
	x.n, x.V = n, math.NaN()
	if v, err := strconv.ParseFloat(n.Value, 64); err == nil && n.Kind == yaml.ScalarNode {
		x.V = v
	}
	return nil
}

func (s *share) UnmarshalYAML(n *yaml.Node) error {
	pct, isPct := strings.CutSuffix(strings.TrimSpace(n.Value), "%")
	_ = s.number.UnmarshalYAML(&yaml.Node{Kind: n.Kind, Value: strings.TrimSpace(pct)})
	s.n = n
	if isPct {
		s.V /= 100
	}
	return nil
}
