// Package conn opens the connections every Spillway process needs, the
// same way in each: NATS that reconnects forever, and Redis with timeouts
// short enough for the failure mode to matter.
package conn

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// NATS connects with reconnects forever: an admitter rides out a
// NATS restart (not ready meanwhile) instead of exiting.
func NATS(url, creds, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close or Drain
				log.Warn("disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", c.ConnectedUrl()) }),
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w (is nats-server running? try `admitter --dev` for an embedded one)", url, err)
	}
	return nc, nil
}

// Redis builds the shared store with short timeouts, so that an
// unreachable Redis costs a submission milliseconds, not seconds.
func Redis(c config.Redis) (*redis.Client, bucket.Store, error) {
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("redis.url: %w", err)
	}
	opt.DialTimeout = max(c.Timeout, 100*time.Millisecond)
	opt.ReadTimeout = max(c.Timeout, 50*time.Millisecond)
	opt.WriteTimeout = opt.ReadTimeout
	opt.MaxRetries = -1 // the failure mode is the retry policy
	opt.PoolSize = max(opt.PoolSize, 64)
	client := redis.NewClient(opt)
	st, err := redisbucket.New(client, redisbucket.WithTimeout(c.Timeout))
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return client, st, nil
}
