package door_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// missingConfig: queue strict keys on X-Client as configured by default
// (on_missing: reject); queue shared opts into one bucket for every
// request without the header; queue byip keys on the client's address.
const missingConfig = `
queues:
  - name: strict
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, nodelay: true}
    backlog: {capacity: 3, leak_rate: 1/m}
  - name: shared
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, nodelay: true, on_missing: shared}
    backlog: {capacity: 3, leak_rate: 1/m}
  - name: byip
    limits:
      - {key: ip, algorithm: leaky_bucket, rate: 1/m, burst: 1, nodelay: true, name: per-ip}
    backlog: {capacity: 3, leak_rate: 1/m}
`

// TestMissingKeyHeader: a request without the header a tier keys on is
// refused 400 bad-key naming the header, on both doors, and takes
// nothing; on_missing: shared puts all such requests in one bucket.
func TestMissingKeyHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, missingConfig, setupOptions{})
	nc := b.nats.Connect(t)

	for _, header := range [][]string{nil, {"X-Client", ""}, {"X-Other", "c"}} {
		r := b.post(t, "strict", nil, header...)
		if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadKey || r.problem.Field != "X-Client" ||
			!strings.Contains(r.problem.Detail, "X-Client") || r.problem.Queue != "strict" {
			t.Errorf("HTTP with headers %q: %d %s, want 400 %s naming X-Client", header, r.code, r.body, spillway.ProblemBadKey)
		}
		if r.header.Get("RateLimit") != "" || r.header.Get("X-RateLimit-Remaining") != "" {
			t.Errorf("HTTP with headers %q: rate-limit headers %v for a request no tier decided", header, r.header)
		}
		rep := ask(t, nc, natsMsg("strict", nil, header...))
		if rep.Status != spillway.Failed || rep.Type != spillway.ProblemBadKey || !strings.Contains(rep.Error, "X-Client") || rep.ID != "" {
			t.Errorf("NATS with headers %q: %+v, want status error, %s naming X-Client", header, rep, spillway.ProblemBadKey)
		}
	}
	if n := b.msgs(t, "strict", queue.Ready) + b.msgs(t, "strict", queue.Backlog); n != 0 {
		t.Errorf("%d jobs stored for requests without the key, want none", n)
	}
	// Nothing was taken: a client with the header still has its burst.
	for i := range 2 {
		if r := b.post(t, "strict", nil, "X-Client", "c"); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
			t.Errorf("job %d of client c: %d %s, want admitted", i+1, r.code, r.body)
		}
	}

	// on_missing: shared: requests without the header share one bucket
	// of burst 1 across both doors.
	if r := b.post(t, "shared", nil); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
		t.Errorf("shared, first job without the header: %d %s, want admitted", r.code, r.body)
	}
	if rep := ask(t, nc, natsMsg("shared", nil)); rep.Status != spillway.Admitted {
		t.Errorf("shared, second job without the header (NATS): %+v, want admitted", rep)
	}
	if r := b.post(t, "shared", nil, "X-Client", ""); r.code != http.StatusTooManyRequests || r.problem.Type != spillway.ProblemRateLimited {
		t.Errorf("shared, third job without the header: %d %s, want 429 %s: the shared bucket is full", r.code, r.body, spillway.ProblemRateLimited)
	}
}

// TestIPTierOnNATS: the NATS door has no client address; a queue with an
// ip tier answers it 400 bad-key instead of keying every producer on one
// empty address.
func TestIPTierOnNATS(t *testing.T) {
	t.Parallel()
	b := setup(t, missingConfig, setupOptions{})
	nc := b.nats.Connect(t)
	for i := range 3 {
		rep := ask(t, nc, natsMsg("byip", nil, "X-Client", "c"))
		if rep.Status != spillway.Failed || rep.Type != spillway.ProblemBadKey || !strings.Contains(rep.Error, "HTTP door") || !strings.Contains(rep.Error, "per-ip") {
			t.Errorf("NATS job %d: %+v, want status error, %s saying ip keys need the HTTP door and naming tier per-ip", i+1, rep, spillway.ProblemBadKey)
		}
	}
	if n := b.msgs(t, "byip", queue.Ready) + b.msgs(t, "byip", queue.Backlog); n != 0 {
		t.Errorf("%d jobs stored from the NATS door, want none", n)
	}
	if r := b.post(t, "byip", nil); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
		t.Errorf("HTTP: %d %s, want admitted: the HTTP door knows the address", r.code, r.body)
	}
}
