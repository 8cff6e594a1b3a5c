package pace_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func rule(pattern string, weight int) queue.WeightRule {
	var p queue.KeyPattern
	if len(pattern) > 0 && pattern[len(pattern)-1] == '*' {
		p = queue.KeyPattern{Key: pattern[:len(pattern)-1], Prefix: true}
	} else {
		p = queue.KeyPattern{Key: pattern}
	}
	return queue.WeightRule{KeyPattern: p, Weight: weight}
}

// TestMergeWeights: a runtime rule replaces the configuration's of its
// pattern; over the union, an exact rule wins, else the longest prefix,
// else *, whichever source each comes from.
func TestMergeWeights(t *testing.T) {
	t.Parallel()
	config := []queue.WeightRule{rule("a", 2), rule("t-*", 3), rule("*", 4), rule("t-ab*", 5)}
	runtime := []queue.WeightRule{rule("t-*", 6), rule("t-abc*", 7), rule("b", 8)}
	f := queue.Fairness{Weights: pace.MergeWeights(config, runtime)}
	for _, tt := range []struct {
		key  string
		want int
	}{
		{"a", 2},      // config exact
		{"b", 8},      // runtime exact
		{"t-x", 6},    // runtime replaces config's t-*
		{"t-ab", 5},   // config's longer prefix over runtime's t-*
		{"t-abcd", 7}, // runtime's longest prefix
		{"zz", 4},     // config's *
	} {
		if got := f.WeightOf(tt.key); got != tt.want {
			t.Errorf("weight of %q = %d, want %d (rules %v)", tt.key, got, tt.want, f.Weights)
		}
	}
	if n := len(f.Weights); n != 6 {
		t.Errorf("%d rules merged, want 6 (t-* once): %v", n, f.Weights)
	}
	if got := (queue.Fairness{Weights: pace.MergeWeights(nil, []queue.WeightRule{rule("*", 9)})}).WeightOf("x"); got != 9 {
		t.Errorf("runtime * alone: weight %d, want 9", got)
	}
}

// TestRuntimeWeightsStore: writers of different patterns at once keep
// every rule (each write is conditional on the revision read); a rule
// set again replaces its pattern's; a delete says whether there was a
// rule; the last delete removes the entry; the count is bounded.
func TestRuntimeWeightsStore(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	kv, err := pace.OpenPacerBucket(t.Context(), srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			r := pace.RuntimeWeight{WeightRule: rule(fmt.Sprintf("k%d", i), i+1), By: "test", At: time.Now()}
			errs <- pace.SetRuntimeWeight(t.Context(), kv, "mail", r)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rs, err := pace.ReadRuntimeWeights(t.Context(), kv, "mail")
	if err != nil || len(rs) != writers {
		t.Fatalf("after %d concurrent writers: %d rules (%v), want every one", writers, len(rs), err)
	}
	if err := pace.SetRuntimeWeight(t.Context(), kv, "mail", pace.RuntimeWeight{WeightRule: rule("k0", 50)}); err != nil {
		t.Fatal(err)
	}
	rs, _ = pace.ReadRuntimeWeights(t.Context(), kv, "mail")
	if i := slices.IndexFunc(rs, func(r pace.RuntimeWeight) bool { return r.Key == "k0" }); len(rs) != writers || i < 0 || rs[i].Weight != 50 {
		t.Errorf("k0 set again to 50: %v", rs)
	}
	for i := range writers {
		found, err := pace.DeleteRuntimeWeight(t.Context(), kv, "mail", queue.KeyPattern{Key: fmt.Sprintf("k%d", i)})
		if err != nil || !found {
			t.Fatalf("delete k%d: found %v, %v", i, found, err)
		}
	}
	if found, err := pace.DeleteRuntimeWeight(t.Context(), kv, "mail", queue.KeyPattern{Key: "k0"}); err != nil || found {
		t.Errorf("delete of a rule that is gone: found %v, %v; want false", found, err)
	}
	if _, err := kv.Get(t.Context(), pace.RuntimeWeightsKey("mail")); err == nil {
		t.Error("every rule deleted: the entry stays, want it deleted")
	}
	for i := range pace.MaxRuntimeWeights {
		if err := pace.SetRuntimeWeight(t.Context(), kv, "full", pace.RuntimeWeight{WeightRule: rule(fmt.Sprintf("k%d", i), 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pace.SetRuntimeWeight(t.Context(), kv, "full", pace.RuntimeWeight{WeightRule: rule("one-more", 1)}); !errors.Is(err, pace.ErrTooManyWeights) {
		t.Errorf("rule %d: %v, want ErrTooManyWeights", pace.MaxRuntimeWeights+1, err)
	}
	if err := pace.SetRuntimeWeight(t.Context(), kv, "full", pace.RuntimeWeight{WeightRule: rule("k0", 2)}); err != nil {
		t.Errorf("a full queue's existing rule set again: %v, want it replaced", err)
	}
}

// TestWeightsFollowTheRuntimeRules: a worker weighs keys by the runtime
// rules over the configuration's entry (or its own weights while there is
// none), and falls back when the runtime rules are removed.
func TestWeightsFollowTheRuntimeRules(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	kv, err := pace.OpenPacerBucket(t.Context(), srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	w := pace.NewWeights(queue.Fairness{Weights: []queue.WeightRule{rule("a", 2)}})
	go w.Run(t.Context(), kv, "hooks", slog.New(slog.DiscardHandler))
	set := func(pattern string, weight int) {
		t.Helper()
		if err := pace.SetRuntimeWeight(t.Context(), kv, "hooks", pace.RuntimeWeight{WeightRule: rule(pattern, weight), At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	set("b", 3)
	waitFor(t, "the runtime rule of b", func() bool { n, _ := w.WeightOf("b"); return n == 3 })
	if n, ok := w.WeightOf("a"); n != 2 || !ok {
		t.Errorf("a under the worker's own rules and a runtime rule of b: %d (%v), want 2", n, ok)
	}
	if err := pace.PublishWeights(t.Context(), kv, "hooks", []queue.WeightRule{rule("a", 4), rule("b", 5)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the published weights", func() bool { n, _ := w.WeightOf("a"); return n == 4 })
	if n, _ := w.WeightOf("b"); n != 3 {
		t.Errorf("b: %d, want the runtime rule's 3 over the published 5", n)
	}
	set("a", 7)
	waitFor(t, "the runtime rule of a", func() bool { n, _ := w.WeightOf("a"); return n == 7 })
	for _, p := range []string{"a", "b"} {
		if _, err := pace.DeleteRuntimeWeight(t.Context(), kv, "hooks", queue.KeyPattern{Key: p}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the published weights again", func() bool {
		a, _ := w.WeightOf("a")
		b, _ := w.WeightOf("b")
		return a == 4 && b == 5
	})
}
