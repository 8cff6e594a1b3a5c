package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// leak_rate is a rate (the leak runs at it), or a mapping {max, adaptive}:
// the leak runs at most at max and, if adaptive, yields to a downstream
// that pushes back (docs/design.md#pushback).
func TestLeakRateForms(t *testing.T) {
	t.Parallel()
	per := func(n int64) bucket.Rate { return bucket.Rate{Count: n, Per: time.Second} }
	for _, tt := range []struct {
		backlog      string
		want         bucket.Rate
		wantAdaptive bool
	}{
		{"{leak_rate: 100/s}", per(100), false},
		{"{leak_rate: {max: 100/s, adaptive: true}}", per(100), true},
		{"{leak_rate: {max: 100/s, adaptive: false}}", per(100), false},
		{"{leak_rate: {max: 100/s}}", per(100), false},
		{"\n      leak_rate:\n        max: 600/m\n        adaptive: true", bucket.Rate{Count: 600, Per: time.Minute}, true},
	} {
		c := mustLoad(t, strings.Replace(minimal, "{leak_rate: 1/s}", tt.backlog, 1))
		b := c.Queues[0].Backlog
		if b.LeakRate != tt.want || b.Adaptive != tt.wantAdaptive {
			t.Errorf("backlog %s: leak %v adaptive %v, want %v %v", tt.backlog, b.LeakRate, b.Adaptive, tt.want, tt.wantAdaptive)
		}
	}
}

func TestLeakRateProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, backlog string
		want          []string
	}{
		{"bad rate", "{leak_rate: fast}",
			[]string{`spillway.yaml:4: queues[0].backlog.leak_rate: expected a rate such as "10/s", got "fast"`}},
		{"bad max", "{leak_rate: {max: 100/x, adaptive: true}}",
			[]string{`spillway.yaml:4: queues[0].backlog.leak_rate.max: expected a rate such as "10/s", got "100/x"`}},
		{"no max", "{leak_rate: {adaptive: true}}",
			[]string{`spillway.yaml:4: queues[0].backlog.leak_rate.max: missing: expected the most backlog jobs that start per unit of time, a rate such as "50/s"`}},
		{"unknown field", "\n      leak_rate:\n        max: 100/s\n        adaptiv: true",
			[]string{`spillway.yaml:7: queues[0].backlog.leak_rate.adaptiv: unknown field (did you mean adaptive?)`}},
		{"adaptive not a boolean", "{leak_rate: {max: 100/s, adaptive: yes please}}",
			[]string{`spillway.yaml:4: queues[0].backlog.leak_rate.adaptive: expected true or false, got "yes please"`}},
		{"a list", "{leak_rate: [100/s]}",
			[]string{`spillway.yaml:4: queues[0].backlog.leak_rate: expected a rate such as "10/s", or a mapping of max and adaptive, got a list`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := problems(t, strings.Replace(minimal, "{leak_rate: 1/s}", tt.backlog, 1))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
