// Package conn opens the connections every Spillway process needs, the
// same way in each: NATS that reconnects forever, and Redis with timeouts
// short enough for the failure mode to matter.
package conn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// NATSConfig is how a process reaches NATS and who it is there (the
// nats: section's connection settings). The zero value but URL connects
// anonymously with NATS's own inbox prefix.
type NATSConfig struct {
	// URL of the servers, comma-separated. A user and password in a URL's
	// user info (nats://user:pass@host:4222) authenticate as that user.
	URL string
	// CredsFile is a NATS credentials file: a user JWT and its nkey seed
	// (default none).
	CredsFile string
	// NkeyFile is a file holding a user's nkey seed ("SU…"), for a server
	// that lists the user by its public nkey (default none).
	NkeyFile string
	// InboxPrefix begins the subject of every reply this process waits
	// for: its JetStream API answers, its pull consumers' messages, its
	// requests' replies (default NATS's own, "_INBOX"). A deployment whose
	// producers may subscribe to _INBOX.> gives each internal role one of
	// its own, such as "_SPILLWAY_INBOX.worker".
	InboxPrefix string
}

// ErrInvalidNATS wraps every problem ValidateNATS reports.
var ErrInvalidNATS = errors.New("conn: invalid NATS settings")

// WantInboxPrefix is what ValidInboxPrefix accepts, for "expected" messages.
const WantInboxPrefix = `a subject prefix such as "_SPILLWAY_INBOX.worker": tokens joined by '.', without spaces, wildcards ('*', '>') or a trailing '.'`

// ValidInboxPrefix reports whether p can begin an inbox subject: one or
// more dot-separated tokens of printable ASCII with no wildcard ('*', '>')
// and no whitespace. A trailing dot is NATS's to add.
func ValidInboxPrefix(p string) bool {
	if p == "" || len(p) > 200 {
		return false
	}
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
		for _, c := range tok {
			if c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
				return false
			}
		}
	}
	return true
}

// ValidateNATS checks the settings c's fields name, each in its own
// words: a problem wraps ErrInvalidNATS and names the field (nats.url,
// nats.inbox_prefix, nats.creds_file and nats.nkey_file together).
func ValidateNATS(c NATSConfig) error {
	var errs []error
	if !ValidNATSURL(c.URL) {
		errs = append(errs, fmt.Errorf("%w: nats.url: expected %s, got %q", ErrInvalidNATS, WantNATSURL, Redact(c.URL)))
	}
	if c.InboxPrefix != "" && !ValidInboxPrefix(c.InboxPrefix) {
		errs = append(errs, fmt.Errorf("%w: nats.inbox_prefix: expected %s, got %q", ErrInvalidNATS, WantInboxPrefix, c.InboxPrefix))
	}
	if c.CredsFile != "" && c.NkeyFile != "" {
		errs = append(errs, fmt.Errorf("%w: nats.creds_file and nats.nkey_file: set one (a credentials file holds its own nkey seed)", ErrInvalidNATS))
	}
	return errors.Join(errs...)
}

// NATS connects with reconnects forever: an admitter rides out a
// NATS restart (not ready meanwhile) instead of exiting. name is the
// connection's name on the server (monitoring's connz).
func NATS(c NATSConfig, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close or Drain
				log.Warn("disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", Redact(c.ConnectedUrl())) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				// The server's authorization refused this process a
				// subject its role needs (docs/security.md): say which.
				log.Error("NATS refused a subject: a permissions violation", "connection", name, "subscription", subject, "err", err)
				return
			}
			log.Warn("NATS reported an error", "connection", name, "subscription", subject, "err", err)
		}),
	}
	auth, err := NATSOptions(c)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.URL, append(append(opts, auth...), nats.Name(name))...)
	if err != nil {
		hint := "is nats-server running? try `admitter --dev` for an embedded one"
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			hint = "check the credentials in nats.url, nats.creds_file or nats.nkey_file"
		}
		return nil, fmt.Errorf("connecting to NATS at %s: %w (%s)", Redact(c.URL), err, hint)
	}
	return nc, nil
}

// NATSOptions are the options that make a connection the one c
// describes beyond its URL: its credentials file or nkey seed, and its
// inbox prefix. The URL's user and password need none: nats.go sends a
// server URL's user info itself. A process that dials NATS itself
// (spillctl) passes them to nats.Connect.
func NATSOptions(c NATSConfig) ([]nats.Option, error) {
	var opts []nats.Option
	if c.CredsFile != "" && c.NkeyFile != "" {
		return nil, fmt.Errorf("%w: nats.creds_file and nats.nkey_file: set one (a credentials file holds its own nkey seed)", ErrInvalidNATS)
	}
	if c.CredsFile != "" {
		if _, err := os.Stat(c.CredsFile); err != nil {
			return nil, fmt.Errorf("nats.creds_file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NkeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey_file: %s: %w", c.NkeyFile, err)
		}
		opts = append(opts, o)
	}
	if c.InboxPrefix != "" {
		if !ValidInboxPrefix(c.InboxPrefix) {
			return nil, fmt.Errorf("%w: nats.inbox_prefix: expected %s, got %q", ErrInvalidNATS, WantInboxPrefix, c.InboxPrefix)
		}
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	return opts, nil
}

// WantNATSURL is what ValidNATSURL accepts, for "expected" messages.
const WantNATSURL = `nats://, tls://, ws:// or wss:// URLs separated by commas, such as "nats://127.0.0.1:4222"`

// ValidNATSURL reports whether NATS can connect to urls as its server
// list: comma-separated URLs with a NATS scheme and a host.
func ValidNATSURL(urls string) bool {
	for part := range strings.SplitSeq(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" {
			return false
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return false
		}
	}
	return true
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
func RedisAuth(ctx context.Context, client redis.UniversalClient, c RedisConfig) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := client.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, code := range []string{"WRONGPASS", "NOAUTH", "ERR AUTH", "ERR invalid password", "ERR Client sent AUTH"} {
		if strings.Contains(msg, code) {
			return fmt.Errorf("redis at %s: authentication failed (check redis.password, redis.username, redis.sentinel.password or the password in redis.url): %w",
				RedisTarget(c), err)
		}
	}
	return nil
}

// RedisTarget describes where c points, with no secret: the URL redacted,
// "sentinel master M at A,B" or "cluster at A,B".
func RedisTarget(c RedisConfig) string {
	switch {
	case c.Sentinel != nil:
		return fmt.Sprintf("sentinel master %q at %s", c.Sentinel.MasterName, strings.Join(c.Sentinel.Addrs, ","))
	case c.Cluster != nil:
		return "cluster at " + strings.Join(c.Cluster.Addrs, ",")
	}
	return Redact(c.URL)
}

// Redis builds the shared store with short timeouts, so that an
// unreachable Redis costs a submission milliseconds, not seconds: a
// client of one server (redis.url), of the master that Sentinel names
// (redis.sentinel; it follows a failover by itself), or of a Redis
// Cluster (redis.cluster).
func Redis(c RedisConfig) (redis.UniversalClient, bucket.Store, error) {
	client, err := RedisClient(c)
	if err != nil {
		return nil, nil, err
	}
	st, err := redisbucket.New(client, redisbucket.WithTimeout(c.Timeout))
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return client, st, nil
}

// RedisClient builds the go-redis client that c describes.
func RedisClient(c RedisConfig) (redis.UniversalClient, error) {
	var tlsConfig *tls.Config
	if c.TLS != nil {
		var err error
		if tlsConfig, err = redisTLS(*c.TLS); err != nil {
			return nil, err
		}
	}
	dial := max(c.Timeout, 100*time.Millisecond)
	read := max(c.Timeout, 50*time.Millisecond)
	const pool = 64
	switch {
	case c.Sentinel != nil:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:       c.Sentinel.MasterName,
			SentinelAddrs:    c.Sentinel.Addrs,
			SentinelUsername: c.Sentinel.Username,
			SentinelPassword: c.Sentinel.Password,
			Username:         c.Username,
			Password:         c.Password,
			TLSConfig:        tlsConfig,
			DialTimeout:      dial,
			ReadTimeout:      read,
			WriteTimeout:     read,
			MaxRetries:       -1, // the failure mode is the retry policy
			PoolSize:         pool,
		}), nil
	case c.Cluster != nil:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:        c.Cluster.Addrs,
			Username:     c.Username,
			Password:     c.Password,
			TLSConfig:    tlsConfig,
			DialTimeout:  dial,
			ReadTimeout:  read,
			WriteTimeout: read,
			// MOVED and ASK redirections (a resharding) are followed;
			// network errors are not retried: the failure mode is the
			// retry policy.
			MaxRetries: -1,
			PoolSize:   pool,
		}), nil
	}
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	opt.DialTimeout = dial
	opt.ReadTimeout = read
	opt.WriteTimeout = read
	opt.MaxRetries = -1 // the failure mode is the retry policy
	opt.PoolSize = max(opt.PoolSize, pool)
	if c.Username != "" {
		opt.Username = c.Username
	}
	if c.Password != "" {
		opt.Password = c.Password
	}
	if tlsConfig != nil {
		if opt.TLSConfig != nil && tlsConfig.ServerName == "" {
			tlsConfig.ServerName = opt.TLSConfig.ServerName // rediss:// set the URL's host
		}
		opt.TLSConfig = tlsConfig
	}
	return redis.NewClient(opt), nil
}

// redisTLS builds the TLS configuration of redis.tls.
func redisTLS(t RedisTLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis.tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.cert_file and key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
