package admit_test

import (
	"context"
	"testing"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestDecisionMetrics: spillway_decisions_total counts each decided
// submission once, by queue, verdict and reason; requests that could not
// be decided (unknown queue, bad cost or key) are not decisions.
func TestDecisionMetrics(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: l
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2}
    backlog: {capacity: 2, per_key_capacity: 1, leak_rate: 1/s}
  - name: r
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 0}
    backlog: {capacity: 10, leak_rate: 1/s}
  - name: t
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	steps := []struct {
		q, client, idem string
		want            spillway.Status
	}{
		{"l", "a", "", spillway.Admitted},
		{"l", "a", "", spillway.Queued},
		{"l", "a", "", spillway.Rejected}, // the key's share of the backlog is full
		{"l", "c", "", spillway.Admitted},
		{"l", "c", "", spillway.Queued}, // the backlog is full now
		{"l", "e", "", spillway.Admitted},
		{"l", "e", "", spillway.Rejected}, // the backlog is full
		{"r", "a", "", spillway.Admitted},
		{"r", "a", "", spillway.Rejected}, // burst 0
		{"r", "x", "k", spillway.Admitted},
		{"r", "x", "k", spillway.Admitted}, // a duplicate
		{"t", "a", "", spillway.Admitted},
		{"t", "a", "", spillway.Queued}, // excess
	}
	for i, s := range steps {
		if ans := submit(t, a, withIdem(request(s.q, s.client), s.idem)); ans.Reply.Status != s.want {
			t.Fatalf("step %d: %+v, want %s", i+1, ans.Reply, s.want)
		}
	}
	for _, r := range []*admit.Request{request("nope", "a"), request("l", ""), withCost(request("l", "z"), 4)} {
		if _, err := a.Submit(context.Background(), r); err == nil {
			t.Fatalf("%+v: no error", r)
		}
	}
	wantSamples(t, b.reg, "spillway_decisions_total", map[string]float64{
		"queue=l,reason=limit,verdict=admitted":            3,
		"queue=l,reason=limit,verdict=queued":              2,
		"queue=l,reason=key_backlog_full,verdict=rejected": 1,
		"queue=l,reason=backlog_full,verdict=rejected":     1,
		"queue=r,reason=limit,verdict=admitted":            2,
		"queue=r,reason=limit,verdict=rejected":            1,
		"queue=r,reason=idempotency,verdict=duplicate":     1,
		"queue=t,reason=limit,verdict=admitted":            1,
		"queue=t,reason=excess,verdict=queued":             1,
	})
	if n := histogramCount(t, b.reg, "spillway_decision_duration_seconds"); n != uint64(len(steps)) {
		t.Errorf("spillway_decision_duration_seconds counted %d decisions, want %d", n, len(steps))
	}
}
