package admit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// overrideQueue has one per-client token bucket (1/m: nothing refills
// within a test) of burst 2, with config overrides for vip (burst 5) and
// every key starting with big- (burst 4). Excess is queued in a backlog
// the test never fills, so a key's admitted count is its burst.
const overrideQueue = `
queues:
  - name: q
    limits:
      - key: "header:X-Client"
        algorithm: token_bucket
        rate: 1/m
        burst: 2
        name: per-client
        overrides:
          - {key: vip, rate: 1/m, burst: 5}
          - {key: "big-*", rate: 1/m, burst: 4}
    backlog: {capacity: 100, leak_rate: 1/m}
`

// admittedOf submits n jobs of client and counts the admitted ones.
func admittedOf(t *testing.T, a *admit.Admitter, client string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		if ans := submit(t, a, request("q", client)); ans.Reply.Status == spillway.Admitted {
			admitted++
		}
	}
	return admitted
}

// TestOverridesDecide: a key's decisions use its override's parameters —
// the config's exact and prefix ones, then a runtime one that replaces a
// prefix for a longer prefix, and its removal.
func TestOverridesDecide(t *testing.T) {
	t.Parallel()
	a, b := setup(t, overrideQueue, setupOptions{})
	for _, tt := range []struct {
		client string
		want   int
	}{{"plain", 2}, {"vip", 5}, {"big-one", 4}} {
		if got := admittedOf(t, a, tt.client, 7); got != tt.want {
			t.Errorf("%s: %d admitted of 7, want %d", tt.client, got, tt.want)
		}
	}
	// The rate-limit headers announce the key's limit.
	if rl := submit(t, a, request("q", "vip")).RateLimit; rl == nil || rl.Policies[0].Quota != 5 {
		t.Errorf("vip's rate limit: %+v, want a quota of 5", rl)
	}

	a.SetRuntimeOverrides([]overrides.Record{
		{Target: overrides.Target{Queue: "q", Tier: "per-client"}, Key: "big-x*", Params: overrides.Params{Rate: "1/m", Burst: 7}, By: "sha256:0", At: time.Now()},
		{Target: overrides.Target{Queue: "q", Tier: "per-client"}, Key: "vip", Params: overrides.Params{Rate: "1/m", Burst: 1}, By: "sha256:0", At: time.Now()},
		{Target: overrides.Target{Queue: "q", Tier: "no-such-tier"}, Key: "x", Params: overrides.Params{Rate: "1/m", Burst: 1}},
		{Target: overrides.Target{Queue: "q", Tier: "per-client"}, Key: "bad", Params: overrides.Params{Limit: 3, Window: "1s"}},
	})
	l := a.Config().Queue("q").Limits[0]
	if o := l.Overrides.Match("vip"); o == nil || o.Source != overrides.SourceRuntime || o.Limit.Burst() != 1 {
		t.Fatalf("vip's override after the runtime one: %+v", o)
	}
	if o := l.Overrides.Match("bad"); o != nil {
		t.Errorf("a runtime override the tier's algorithm refuses is in force: %+v", o)
	}
	// A changed limit is a fresh bucket: vip spent its 5, and gets its
	// new burst of 1.
	for _, tt := range []struct {
		client string
		want   int
	}{{"vip", 1}, {"big-xy", 7}, {"big-two", 4}} {
		if got := admittedOf(t, a, tt.client, 8); got != tt.want {
			t.Errorf("after the runtime overrides, %s: %d admitted of 8, want %d", tt.client, got, tt.want)
		}
	}
	// A cost only the override grants is not bad-cost for its keys.
	r := request("q", "big-xz")
	r.Cost = 6
	if ans := submit(t, a, r); ans.Reply.Status != spillway.Admitted {
		t.Errorf("cost 6 for big-xz (burst 7): %s", ans.Reply.Status)
	}
	r = request("q", "plain2")
	r.Cost = 6
	var e *admit.Error
	if _, err := a.Submit(t.Context(), r); !errors.As(err, &e) || e.Type != spillway.ProblemBadCost {
		t.Errorf("cost 6 for a key of burst 2: %v, want bad-cost", err)
	}

	// Removed, vip is back on the config's override, and on its bucket.
	a.SetRuntimeOverrides(nil)
	if o := a.Config().Queue("q").Limits[0].Overrides.Match("vip"); o == nil || o.Source != overrides.SourceConfig {
		t.Errorf("vip's override once the runtime one is gone: %+v", o)
	}
	if got := admittedOf(t, a, "vip", 3); got != 0 {
		t.Errorf("vip back on the config's override: %d admitted, want 0 (its bucket is spent)", got)
	}
	// A reload keeps the runtime overrides.
	a.SetRuntimeOverrides([]overrides.Record{{Target: overrides.Target{Queue: "q", Tier: "per-client"}, Key: "z", Params: overrides.Params{Rate: "1/m", Burst: 3}}})
	a.SetConfig(b.Config)
	if o := a.Config().Queue("q").Limits[0].Overrides.Match("z"); o == nil || o.Limit.Burst() != 3 {
		t.Errorf("z's runtime override after a reload: %+v", o)
	}
}
