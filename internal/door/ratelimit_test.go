package door_test

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// namedConfig: rate 1/m, burst 1 (quota 2 per 120 s) on a tier named
// per-client, and a second queue with two tiers, the first unnamed.
const namedConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, nodelay: true, name: per-client}
    backlog: {capacity: 3, leak_rate: 1/s}
  - name: two
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 9, nodelay: true}
      - {key: global, algorithm: leaky_bucket, rate: 1/s, burst: 1, nodelay: true, name: everyone}
    backlog: {capacity: 3, leak_rate: 1/s}
`

// rateLimitOf is an answer's rate-limit headers, in one line.
func rateLimitOf(r response) string {
	var parts []string
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if v := r.header.Get(k); v != "" {
			parts = append(parts, k+": "+v)
		}
	}
	return strings.Join(parts, " | ")
}

// TestRateLimitHeadersNamedTier: a tier's name is the policy's name in
// RateLimit-Policy and RateLimit; unnamed tiers keep tier<i>.
func TestRateLimitHeadersNamedTier(t *testing.T) {
	t.Parallel()
	b := setup(t, namedConfig, setupOptions{})
	for i, want := range []string{
		`RateLimit-Policy: "per-client";q=2;w=120 | RateLimit: "per-client";r=1;t=60 | X-RateLimit-Limit: 2 | X-RateLimit-Remaining: 1 | X-RateLimit-Reset: 60`,
		`RateLimit-Policy: "per-client";q=2;w=120 | RateLimit: "per-client";r=0;t=120 | X-RateLimit-Limit: 2 | X-RateLimit-Remaining: 0 | X-RateLimit-Reset: 120`,
		`RateLimit-Policy: "per-client";q=2;w=120 | RateLimit: "per-client";r=0;t=60 | X-RateLimit-Limit: 2 | X-RateLimit-Remaining: 0 | X-RateLimit-Reset: 60`,
	} {
		if got := rateLimitOf(b.post(t, "q", nil, "X-Client", "c")); got != want {
			t.Errorf("job %d:\n got %s\nwant %s", i+1, got, want)
		}
	}
	r := b.post(t, "two", nil, "X-Client", "c")
	if p := r.header.Get("RateLimit-Policy"); r.code != 202 || p != `"everyone";q=2;w=2` || !strings.HasPrefix(r.header.Get("RateLimit"), `"everyone";r=1;t=`) {
		t.Errorf("two tiers, the named one bounding: %d %s", r.code, rateLimitOf(r))
	}
}

// TestRateLimitHeadersOnDuplicates: an idempotent replay answers with the
// rate-limit headers of the first answer (it takes nothing), its reset no
// later than the first's.
func TestRateLimitHeadersOnDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, namedConfig, setupOptions{})
	first := b.post(t, "q", nil, "X-Client", "c", spillway.HeaderIdempotencyKey, "order-1")
	if first.code != http.StatusAccepted || first.reply.Duplicate {
		t.Fatalf("first: %d %s", first.code, first.body)
	}
	for i := range 2 {
		again := b.post(t, "q", nil, "X-Client", "c", spillway.HeaderIdempotencyKey, "order-1")
		if again.code != http.StatusAccepted || !again.reply.Duplicate || again.reply.ID != first.reply.ID {
			t.Fatalf("replay %d: %d %s, want 202, a duplicate of %s", i+1, again.code, again.body, first.reply.ID)
		}
		if got, want := rateLimitOf(again), rateLimitOf(first); got != want {
			t.Errorf("replay %d:\n got %s\nwant %s (the first answer's)", i+1, got, want)
		}
	}
	// The replays took nothing: the key still has its second unit.
	if r := b.post(t, "q", nil, "X-Client", "c"); r.code != http.StatusAccepted || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("after the replays: %d %s, want 202 with 0 remaining", r.code, rateLimitOf(r))
	}
}

// downFailover is a failure mode over a Redis nothing listens at: every
// decision the shared store is asked for fails.
func downFailover(t *testing.T, mode config.FailureMode) *admit.Failover {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	client, shared, err := conn.Redis(conn.RedisConfig{URL: "redis://" + addr + "/0", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	f, err := admit.NewFailover(shared, mode)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRateLimitHeadersInFailureModes: with the shared store down, local
// decides at the same limits and says so in the headers; open decides
// without counting, so its answers carry the policies in force and
// nothing about what remains; closed decides nothing and carries none.
func TestRateLimitHeadersInFailureModes(t *testing.T) {
	t.Parallel()
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		b := setup(t, namedConfig, setupOptions{store: downFailover(t, config.FailLocal)})
		for i, want := range []string{
			`RateLimit-Policy: "per-client";q=2;w=120 | RateLimit: "per-client";r=1;t=60 | X-RateLimit-Limit: 2 | X-RateLimit-Remaining: 1 | X-RateLimit-Reset: 60`,
			`RateLimit-Policy: "per-client";q=2;w=120 | RateLimit: "per-client";r=0;t=120 | X-RateLimit-Limit: 2 | X-RateLimit-Remaining: 0 | X-RateLimit-Reset: 120`,
			`RateLimit-Policy: "per-client";q=2;w=120 | RateLimit: "per-client";r=0;t=60 | X-RateLimit-Limit: 2 | X-RateLimit-Remaining: 0 | X-RateLimit-Reset: 60`,
		} {
			if got := rateLimitOf(b.post(t, "q", nil, "X-Client", "c")); got != want {
				t.Errorf("job %d:\n got %s\nwant %s", i+1, got, want)
			}
		}
	})
	t.Run("open", func(t *testing.T) {
		t.Parallel()
		b := setup(t, namedConfig, setupOptions{store: downFailover(t, config.FailOpen)})
		for i := range 3 {
			r := b.post(t, "two", nil, "X-Client", "c")
			if want := `RateLimit-Policy: "tier0";q=10;w=600, "everyone";q=2;w=2`; r.code != http.StatusAccepted || rateLimitOf(r) != want {
				t.Errorf("job %d: %d\n got %s\nwant %s", i+1, r.code, rateLimitOf(r), want)
			}
		}
	})
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, namedConfig, setupOptions{store: downFailover(t, config.FailClosed)})
		r := b.post(t, "q", nil, "X-Client", "c")
		if r.code != http.StatusServiceUnavailable || rateLimitOf(r) != "" || r.header.Get("Retry-After") != strconv.FormatInt((r.problem.RetryAfterMS+999)/1000, 10) {
			t.Errorf("closed: %d %s %v, want 503 with Retry-After and no rate-limit headers (nothing decided)", r.code, r.body, r.header)
		}
	})
}
