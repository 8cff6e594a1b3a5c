package redisbucket

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the store uses: the scripting
// commands that redis.Script runs on, and pipelines. *redis.Client (also
// as redis.NewFailoverClient returns it), *redis.ClusterClient (also from
// redis.NewFailoverClusterClient) and *redis.Ring satisfy it.
type Client interface {
	redis.Scripter
	// Pipeline sends the script runs of several groups (or hash tags) in
	// one round trip.
	Pipeline() redis.Pipeliner
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
)

// runScript runs scr once outside a pipeline: EVALSHA, and EVAL when Redis
// answers NOSCRIPT (redis.Script.Run).
func (s *Store) runScript(ctx context.Context, scr *redis.Script, keys []string, arg []byte) *redis.Cmd {
	return scr.Run(ctx, s.client, keys, arg)
}

// runPipelined runs scr n times, run i with keys(i) and arg(i), and
// returns the commands in order: one run alone as runScript does it, more
// in one pipeline of EVALSHAs. Runs that Redis answered NOSCRIPT (after
// SCRIPT FLUSH, a restart or a failover) go again as EVAL, which also
// caches the script, in a second pipeline. redis.Script.Run cannot do this
// inside a pipeline, where no answer is known until Exec; loading the
// script first (Script.Load) would not do either, as the cache can be
// flushed between the load and the pipeline. A NOSCRIPT run did not
// execute, so nothing is applied twice.
func (s *Store) runPipelined(ctx context.Context, scr *redis.Script, n int, keys func(int) []string, arg func(int) []byte) []*redis.Cmd {
	cmds := make([]*redis.Cmd, n)
	if n == 1 {
		cmds[0] = s.runScript(ctx, scr, keys(0), arg(0))
		return cmds
	}
	pipe := s.client.Pipeline()
	for i := range cmds {
		cmds[i] = scr.EvalSha(ctx, pipe, keys(i), arg(i))
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var again redis.Pipeliner
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			if again == nil {
				again = s.client.Pipeline()
			}
			cmds[i] = scr.Eval(ctx, again, keys(i), arg(i))
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
	return cmds
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
