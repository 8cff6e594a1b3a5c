package admit_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/testkit/metrictest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// shadowQueue is a queue whose per-client tier (leaky, 1/m, burst 4,
// delay 2: nothing leaks out measurably within a test) has the given
// mode, behind a global tier that admits everything the test sends.
func shadowQueue(mode string) string {
	return fmt.Sprintf(`
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1000/s, burst: 1000}
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 4, delay: 2, name: per-client, mode: %s}
    backlog: {capacity: 100, leak_rate: 100/s}
`, mode)
}

// shadowBurst is the costs of a burst of one client: the per-client tier
// admits three, queues the fourth, refuses the fifth (cost 2, over the
// burst), queues the sixth (which fits only if the fifth took nothing)
// and refuses the rest: half of the burst.
var shadowBurst = []int64{1, 1, 1, 1, 2, 1, 1, 1, 1, 1}

// TestShadowTierAsIfEnforced: the same burst against a queue whose
// per-client tier enforces and one where it is in shadow. In shadow
// every job is admitted, as the global tier decides, with no not-before;
// and for each job the Spillway-Shadow entry says what the enforcing run
// answered (admitted: none; queued: would-queue; rejected: would-reject),
// and spillway_shadow_decisions_total counts what the enforcing run's
// decisions count.
func TestShadowTierAsIfEnforced(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			run := func(mode string) ([]admit.Answer, *testBundle) {
				var o setupOptions
				if store == "redis" {
					_, o.primary = redisStore(t)
				}
				a, b := setup(t, shadowQueue(mode), o)
				var answers []admit.Answer
				for _, cost := range shadowBurst {
					r := request("q", "c")
					r.Cost = cost
					answers = append(answers, submit(t, a, r))
				}
				return answers, b
			}
			enforced, eb := run("enforce")
			shadowed, sb := run("shadow")

			want := map[spillway.Status]string{spillway.Admitted: spillway.ShadowAdmitted, spillway.Queued: spillway.ShadowWouldQueue, spillway.Rejected: spillway.ShadowWouldReject}
			counts := map[string]float64{}
			for i := range shadowBurst {
				e, s := enforced[i], shadowed[i]
				if s.Reply.Status != spillway.Admitted || s.Reply.NotBefore != nil || s.Decision.Verdict != bucket.Admitted {
					t.Errorf("job %d in shadow: %+v (verdict %s), want admitted now", i+1, s.Reply, s.Decision.Verdict)
				}
				v := want[e.Reply.Status]
				counts[v]++
				if got, wantS := s.Shadow, []admit.ShadowDecision{{Tier: "per-client", Verdict: v}}; !slices.Equal(got, wantS) {
					t.Errorf("job %d: shadow decisions %v, want %v (enforcing, it was %s)", i+1, got, wantS, e.Reply.Status)
				}
				var wantHeader []string
				if v != spillway.ShadowAdmitted {
					wantHeader = []string{"per-client " + v}
				}
				if got := s.ShadowHeader(); !slices.Equal(got, wantHeader) {
					t.Errorf("job %d: Spillway-Shadow %q, want %q", i+1, got, wantHeader)
				}
				// Shadow tiers take no part in the rate-limit headers.
				if s.RateLimit == nil || len(s.RateLimit.Policies) != 1 || s.RateLimit.Policies[0].Name != "tier0" {
					t.Errorf("job %d: rate limit %+v, want the global tier's policy only", i+1, s.RateLimit)
				}
				if len(e.Shadow) != 0 {
					t.Errorf("job %d enforcing: shadow decisions %v, want none", i+1, e.Shadow)
				}
			}
			if counts[spillway.ShadowAdmitted] != 3 || counts[spillway.ShadowWouldQueue] != 2 || counts[spillway.ShadowWouldReject] != 5 {
				t.Errorf("the enforcing run answered %v, want 3 admitted, 2 queued and 5 rejected", counts)
			}
			wantSamples(t, sb.reg, "spillway_shadow_decisions_total", map[string]float64{
				"queue=q,tier=per-client,verdict=admitted":     counts[spillway.ShadowAdmitted],
				"queue=q,tier=per-client,verdict=would-queue":  counts[spillway.ShadowWouldQueue],
				"queue=q,tier=per-client,verdict=would-reject": counts[spillway.ShadowWouldReject],
			})
			// What the enforcing run's decisions count, verdict by verdict.
			es := samples(t, eb.reg, "spillway_decisions_total")
			for status, v := range want {
				if got := es["queue=q,reason=limit,verdict="+string(status)]; got != counts[v] {
					t.Errorf("enforcing: %s decisions %v, shadow counted %s %v", status, got, v, counts[v])
				}
			}
			if got := sb.msgs(t, "q", queue.Ready); got != uint64(len(shadowBurst)) {
				t.Errorf("READY holds %d jobs in shadow, want all %d", got, len(shadowBurst))
			}
			if got := samples(t, eb.reg, "spillway_shadow_decisions_total"); len(got) != 0 {
				t.Errorf("enforcing: shadow decisions %v, want none", got)
			}
		})
	}
}

// TestShadowTierStoreDown: while the shared store is unreachable, failure
// mode open admits without a store, and no shadow tier is decided or
// counted (nor is the failure mode asked again per shadow tier); failure
// mode local decides the shadow tier in the local store, as it decides
// the enforcing tiers.
func TestShadowTierStoreDown(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode config.FailureMode
		want []admit.ShadowDecision
	}{
		{config.FailOpen, nil},
		{config.FailLocal, []admit.ShadowDecision{{Tier: "per-client", Verdict: spillway.ShadowAdmitted}}},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			srv, store := redisStore(t)
			a, b := setup(t, shadowQueue("shadow"), setupOptions{primary: store, mode: tt.mode})
			srv.Kill()
			ans := submit(t, a, request("q", "c"))
			if ans.Reply.Status != spillway.Admitted || !slices.Equal(ans.Shadow, tt.want) {
				t.Errorf("with Redis down: %s, shadow %v; want admitted, shadow %v", ans.Reply.Status, ans.Shadow, tt.want)
			}
			if got := metrictest.Sum(t, b.reg, "spillway_shadow_decisions_total"); got != float64(len(tt.want)) {
				t.Errorf("shadow decisions counted: %v, want %d", got, len(tt.want))
			}
			if got := samples(t, b.reg, "spillway_failure_mode_total")["mode="+string(tt.mode)]; got != float64(1+len(tt.want)) {
				t.Errorf("failure mode %s decisions: %v, want %d (the job's, and one per shadow tier decided locally)", tt.mode, got, 1+len(tt.want))
			}
		})
	}
}

// TestShadowTierFirst: a shadow tier ahead of the enforcing one. The
// enforcing tier bounds every answer and names the rate-limit policy; a
// job the enforcing tier refuses is decided by no shadow tier and takes
// nothing from it.
func TestShadowTierFirst(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 0, name: strict, mode: shadow}
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, nodelay: true, name: loose}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	for i, want := range []struct {
		status spillway.Status
		shadow []admit.ShadowDecision
	}{
		{spillway.Admitted, []admit.ShadowDecision{{Tier: "strict", Verdict: spillway.ShadowAdmitted}}},
		{spillway.Admitted, []admit.ShadowDecision{{Tier: "strict", Verdict: spillway.ShadowWouldReject}}},
		{spillway.Rejected, nil},
	} {
		ans := submit(t, a, request("q", "c"))
		if ans.Reply.Status != want.status || !slices.Equal(ans.Shadow, want.shadow) {
			t.Errorf("job %d: %s, shadow %v; want %s, shadow %v", i+1, ans.Reply.Status, ans.Shadow, want.status, want.shadow)
		}
		if ans.RateLimit == nil || len(ans.RateLimit.Policies) != 1 || ans.RateLimit.Policies[0].Name != "loose" {
			t.Errorf("job %d: rate limit %+v, want the loose tier's policy", i+1, ans.RateLimit)
		}
	}
	wantSamples(t, b.reg, "spillway_shadow_decisions_total", map[string]float64{
		"queue=q,tier=strict,verdict=admitted":     1,
		"queue=q,tier=strict,verdict=would-reject": 1,
	})
}

// TestShadowMetricsInit: Init starts each shadow tier's decisions at 0
// for every verdict, and a shadow tier adds no series to the decisions
// (a shadow token bucket's excess queues nothing).
func TestShadowMetricsInit(t *testing.T) {
	t.Parallel()
	_, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: global, algorithm: leaky_bucket, rate: 10/s, burst: 5}
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 5, name: tb, mode: shadow}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	reg := prometheus.NewRegistry()
	admitterd.NewAdmitMetrics(reg).Init(b.Config, "memory")
	wantSamples(t, reg, "spillway_shadow_decisions_total", map[string]float64{
		"queue=q,tier=tb,verdict=admitted":     0,
		"queue=q,tier=tb,verdict=would-queue":  0,
		"queue=q,tier=tb,verdict=would-reject": 0,
	})
	if _, ok := samples(t, reg, "spillway_decisions_total")["queue=q,reason=excess,verdict=queued"]; ok {
		t.Error("spillway_decisions_total starts queued/excess for a queue whose only non-leaky tier is in shadow")
	}
}
