package queue_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// WeightOf picks the most specific rule that matches, whatever the
// rules' order: an exact key, else the longest prefix, else weight 1.
func TestWeightOfMostSpecific(t *testing.T) {
	t.Parallel()
	rules := []queue.WeightRule{
		{KeyPattern: queue.KeyPattern{Key: "", Prefix: true}, Weight: 5},
		{KeyPattern: queue.KeyPattern{Key: "tenant-", Prefix: true}, Weight: 3},
		{KeyPattern: queue.KeyPattern{Key: "tenant-a"}, Weight: 2},
		{KeyPattern: queue.KeyPattern{Key: "t", Prefix: true}, Weight: 4},
	}
	want := map[string]int{"tenant-a": 2, "tenant-ab": 3, "tenant-": 3, "tx": 4, "x": 5, "": 5}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}} {
		var f queue.Fairness
		for _, i := range order {
			f.Weights = append(f.Weights, rules[i])
		}
		for key, w := range want {
			if got := f.WeightOf(key); got != w {
				t.Errorf("rules in order %v: WeightOf(%q) = %d, want %d", order, key, got, w)
			}
		}
	}
	if got := (queue.Fairness{}).WeightOf("any"); got != 1 {
		t.Errorf("no rules: WeightOf = %d, want 1", got)
	}
	if got := (queue.Fairness{Weights: rules[2:3]}).WeightOf("tenant-b"); got != 1 {
		t.Errorf("no rule matches: WeightOf = %d, want 1", got)
	}
}

func TestValidateFairness(t *testing.T) {
	t.Parallel()
	base := queue.Config{Name: "q"}
	for _, c := range []struct {
		name   string
		f      queue.Fairness
		fields []string
	}{
		{"zero", queue.Fairness{}, nil},
		{"bounds", queue.Fairness{MinShare: queue.MaxMinShare, Weights: []queue.WeightRule{{KeyPattern: queue.KeyPattern{Key: "a"}, Weight: 1}, {KeyPattern: queue.KeyPattern{Key: "b", Prefix: true}, Weight: queue.MaxWeight}}}, nil},
		{"weight 0", queue.Fairness{Weights: []queue.WeightRule{{KeyPattern: queue.KeyPattern{Key: "a"}, Weight: 0}}}, []string{`fairness.weights["a"]`}},
		{"prefix weight over", queue.Fairness{Weights: []queue.WeightRule{{KeyPattern: queue.KeyPattern{Key: "t-", Prefix: true}, Weight: queue.MaxWeight + 1}}}, []string{`fairness.weights["t-*"]`}},
		{"share over", queue.Fairness{MinShare: 0.51}, []string{"fairness.min_share"}},
		{"share negative", queue.Fairness{MinShare: -0.01}, []string{"fairness.min_share"}},
		{"share NaN", queue.Fairness{MinShare: math.NaN()}, []string{"fairness.min_share"}},
	} {
		cfg := base
		cfg.Fairness = c.f
		var got []string
		if err := cfg.Validate(); err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var fe *queue.FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("%s: %v is not a *queue.FieldError", c.name, e)
				}
				got = append(got, fe.Field)
			}
		}
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s: problems with %v, want %v", c.name, got, c.fields)
		}
	}
}
