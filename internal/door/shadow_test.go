package door_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// shadowConfig: an enforcing per-client tier that admits everything the
// test sends, and two shadow tiers: strict (leaky 1/m, burst 1, no delay,
// keyed on X-Tenant) and hourly (one job an hour for everybody).
const shadowConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 9, nodelay: true, name: per-client}
      - {key: "header:X-Tenant", algorithm: leaky_bucket, rate: 1/m, burst: 1, name: strict, mode: shadow}
      - {key: global, algorithm: sliding_log, limit: 1, window: 1h, name: hourly, mode: shadow}
    backlog: {capacity: 10, leak_rate: 1/s}
`

// TestShadowHeaders: both doors answer a Spillway-Shadow entry for each
// shadow tier that would not admit the job, in the order of the limits,
// and admit it all the same; a shadow tier that cannot key the request
// would reject it, and the request is admitted; the rate-limit headers
// name the enforcing tier only.
func TestShadowHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, shadowConfig, setupOptions{})
	for i, want := range [][]string{
		nil,
		{"strict would-queue", "hourly would-queue"},
		{"strict would-reject", "hourly would-queue"},
	} {
		r := b.post(t, "q", nil, "X-Client", "c", "X-Tenant", "t")
		if r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
			t.Fatalf("job %d over HTTP: %d %s, want 202 admitted", i+1, r.code, r.body)
		}
		if got := r.header.Values(spillway.HeaderShadow); !slices.Equal(got, want) {
			t.Errorf("job %d over HTTP: %s %q, want %q", i+1, spillway.HeaderShadow, got, want)
		}
		if p := r.header.Get("RateLimit-Policy"); p != `"per-client";q=10;w=600` {
			t.Errorf("job %d over HTTP: RateLimit-Policy %s, want the per-client tier's only", i+1, p)
		}
	}

	nc := b.nats.Connect(t)
	resp, err := apitest.Request(t, nc, natsMsg("q", nil, "X-Client", "d"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(spillway.HeaderStatus); got != string(spillway.Admitted) {
		t.Errorf("over NATS without X-Tenant: %s %q (%s), want admitted", spillway.HeaderStatus, got, resp.Data)
	}
	if got, want := resp.Header.Values(spillway.HeaderShadow), []string{"strict would-reject", "hourly would-queue"}; !slices.Equal(got, want) {
		t.Errorf("over NATS without X-Tenant: %s %q, want %q", spillway.HeaderShadow, got, want)
	}
}
