package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialTimeout bounds one dial plus one command when the context has no
// deadline.
const dialTimeout = 2 * time.Second

// command runs one command on the server at addr over a new connection of
// a go-redis client of its own, authenticated when password is not empty,
// and closes it. The reply is read as RESP2: a string (simple and bulk
// strings), an int64, nil (a null reply) or an []any (whose elements may be
// redis.Error). A connection of its own per command: a server just killed
// or restarted leaves no stale connection behind, and nothing is retried.
func command(ctx context.Context, addr string, tlsConfig *tls.Config, user, password string, args ...string) (any, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialTimeout)
		defer cancel()
	}
	c := redis.NewClient(&redis.Options{
		Addr:      addr,
		Username:  user,
		Password:  password,
		TLSConfig: tlsConfig,
		// RESP2: arrays where RESP3 would give maps (SENTINEL REPLICAS,
		// ROLE), the shapes the callers read.
		Protocol:              2,
		DisableIdentity:       true,
		MaxRetries:            -1,
		PoolSize:              1,
		ContextTimeoutEnabled: true,
	})
	defer c.Close()
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	v, err := c.Do(ctx, a...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// infoField returns the value of field in the reply to INFO.
func infoField(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == field {
			return v, true
		}
	}
	return "", false
}
