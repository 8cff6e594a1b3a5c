package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Which setup errors a worker waits out (the cluster cannot take the
// request now) and which end its Run (they will not pass). The errors are
// JetStream's own, as the API answers them; TestWorkerStartWaitsForServersDown
// meets them from real servers, but which one a test meets depends on
// timing.
func TestClusterUnready(t *testing.T) {
	api := func(code jetstream.ErrorCode, desc string) error {
		return fmt.Errorf("queue: stream SPILLWAY_q_READY: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: desc})
	}
	perm := fmt.Errorf("%w: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.SPILLWAY_q_READY\"", nats.ErrPermissionViolation)
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		err     error
		connErr error
		want    bool
	}{
		{"a server down or not yet heard from", live, api(10005, "no suitable peers for placement, peer offline"), nil, true},
		{"a server down, and a tag no server has", live, api(10005, "no suitable peers for placement, peer offline, tags not matched ['ssd']"), nil, false},
		{"fewer servers than replicas", live, api(10005, "no suitable peers for placement"), nil, false},
		{"no meta leader", live, api(10008, "JetStream system temporarily unavailable"), nil, true},
		{"not led", live, api(10009, "JetStream cluster can not handle request"), nil, true},
		{"replicas on a server alone", live, api(10074, "replicas > 1 not supported in non-clustered mode"), nil, false},
		{"a stream of another config", live, api(10058, "stream name already in use with a different configuration"), nil, false},
		{"no answer in time", live, fmt.Errorf("queue: stream SPILLWAY_q_READY: %w", context.DeadlineExceeded), nil, true},
		{"no answer: the request was not allowed", live, context.DeadlineExceeded, perm, false},
		{"no answer, an older error not about permissions", live, context.DeadlineExceeded, errors.New("nats: stale connection"), true},
		{"a server without JetStream", live, nats.ErrNoResponders, nil, false},
		{"the worker stopping", gone, context.Canceled, nil, false},
		{"the worker stopping during a placement refusal", gone, api(10008, "JetStream system temporarily unavailable"), nil, false},
	} {
		if got := clusterUnready(c.ctx, c.err, c.connErr); got != c.want {
			t.Errorf("%s: clusterUnready(%v, last error %v) = %v, want %v", c.name, c.err, c.connErr, got, c.want)
		}
	}
}
