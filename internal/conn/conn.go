// Package conn opens the connections every Spillway process needs, the
// same way in each: NATS that reconnects forever, and Redis with timeouts
// short enough for the failure mode to matter.
package conn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
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
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", Redact(c.ConnectedUrl())) }),
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		hint := "is nats-server running? try `admitter --dev` for an embedded one"
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			hint = "check the credentials in nats.url or nats.creds_file"
		}
		return nil, fmt.Errorf("connecting to NATS at %s: %w (%s)", Redact(url), err, hint)
	}
	return nc, nil
}

// Redact hides the secrets of a URL list (comma-separated, as nats.url
// takes): a password, or a user name alone (a NATS token), becomes
// "xxxxx", so that a URL can be logged.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			if strings.Contains(p, "@") {
				parts[i] = "(a URL with credentials that does not parse)"
			}
			continue
		}
		if u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// RedisAuth reports a Redis server that refuses the client's credentials
// (a wrong or missing password): a mistake no retry or failure mode can
// mend, unlike a server that is down, for which it returns nil.
func RedisAuth(ctx context.Context, client *redis.Client, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := client.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, code := range []string{"WRONGPASS", "NOAUTH", "ERR AUTH", "ERR invalid password", "ERR Client sent AUTH"} {
		if strings.HasPrefix(msg, code) {
			return fmt.Errorf("redis at %s: authentication failed (check the password in redis.url): %w", Redact(rawURL), err)
		}
	}
	return nil
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
