package monitoring

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quietRedis drops go-redis's own log lines: one of the test's admitters
// has an unreachable Redis on purpose, and its client would log every
// failed dial to stderr. The admitter counts them in
// spillway_store_errors_total, which the tests read instead.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the HTTP clients close on their
		// own schedule.
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}
