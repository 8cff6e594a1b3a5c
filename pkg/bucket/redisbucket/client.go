package redisbucket

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the store uses. *redis.Client,
// *redis.ClusterClient and *redis.Ring satisfy it.
type Client interface {
	// EvalSha runs the decision script by its digest.
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	// Eval runs (and thereby loads) the script when Redis answers NOSCRIPT.
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	// Pipeline sends the script calls of several groups in one round trip.
	Pipeline() redis.Pipeliner
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
)
