package conn

import (
	"errors"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidRedis is wrapped by every problem RedisConfig.Validate
// reports.
var ErrInvalidRedis = errors.New("conn: invalid Redis settings")

// RedisConfig is how to reach the shared bucket store (redis:): one server
// (URL), a Sentinel-managed master (Sentinel) or a Redis Cluster
// (Cluster), at most one of them. None of them means the in-memory store
// of each process.
type RedisConfig struct {
	URL      string
	Sentinel *RedisSentinel // nil: no Sentinel
	Cluster  *RedisCluster  // nil: not a cluster
	// Username and Password are the ACL user of the data servers (a URL
	// may carry them instead; "" = the default user, no password).
	Username string
	Password string
	TLS      *RedisTLS // nil: TLS only if the URL is rediss://

	Timeout time.Duration // one decision's budget, > 0
}

// RedisSentinel names a master that Redis Sentinel manages (redis.sentinel:).
type RedisSentinel struct {
	MasterName string   // as the sentinels monitor it
	Addrs      []string // host:port of one or more sentinels
	// Username and Password authenticate to the sentinels themselves
	// (sentinels have their own ACL); "" = none.
	Username string
	Password string
}

// RedisCluster is a Redis Cluster (redis.cluster:).
type RedisCluster struct {
	Addrs []string // host:port of one or more nodes; the rest are discovered
}

// RedisTLS turns TLS on for every connection to Redis (redis.tls:).
type RedisTLS struct {
	CAFile     string // PEM roots to verify the servers; "" = the system's
	CertFile   string // client certificate (PEM), with KeyFile; "" = none
	KeyFile    string
	ServerName string // "" = the host connected to
}

// Shared reports whether a shared store is configured: a URL, a Sentinel
// or a cluster.
func (r RedisConfig) Shared() bool { return r.URL != "" || r.Sentinel != nil || r.Cluster != nil }

// SameConnection reports whether r and o connect alike: the same servers,
// credentials, TLS and timeout (the settings a reload cannot change).
func (r RedisConfig) SameConnection(o RedisConfig) bool {
	eq := func(a, b *RedisSentinel) bool {
		return (a == nil) == (b == nil) && (a == nil || (a.MasterName == b.MasterName && a.Username == b.Username &&
			a.Password == b.Password && slices.Equal(a.Addrs, b.Addrs)))
	}
	return r.URL == o.URL && r.Username == o.Username && r.Password == o.Password && r.Timeout == o.Timeout &&
		eq(r.Sentinel, o.Sentinel) &&
		(r.Cluster == nil) == (o.Cluster == nil) && (r.Cluster == nil || slices.Equal(r.Cluster.Addrs, o.Cluster.Addrs)) &&
		(r.TLS == nil) == (o.TLS == nil) && (r.TLS == nil || *r.TLS == *o.TLS)
}

// FieldError is one setting of a RedisConfig that cannot be used, named as
// the configuration file names it (redis.url, redis.sentinel.addrs[1],
// redis.tls). It wraps ErrInvalidRedis.
type FieldError struct {
	Field string
	// Want is what was expected and Got what was found (quoted when it is
	// a value, a password redacted); or Reason says what is wrong instead.
	Want, Got, Reason string
	// Other is the setting given first that Field conflicts with ("" if
	// none): redis.sentinel given with redis.url.
	Other string
}

// Problem is the error without the field: "expected WANT, got GOT" or the
// reason.
func (e *FieldError) Problem() string {
	if e.Reason != "" {
		return e.Reason
	}
	return "expected " + e.Want + ", got " + e.Got
}

func (e *FieldError) Error() string { return "conn: " + e.Field + ": " + e.Problem() }

// Unwrap makes errors.Is(err, ErrInvalidRedis) true.
func (e *FieldError) Unwrap() error { return ErrInvalidRedis }

// What a value looks like, for "expected" messages.
const (
	WantRedisURL  = `a redis://, rediss:// or unix:// URL such as "redis://127.0.0.1:6379/0"`
	WantRedisAddr = `a host:port address such as "10.0.0.5:26379"`
)

// Validate reports every setting of r that cannot be used, each a
// *FieldError, joined (errors.Join); nil if there is none. An Addrs that
// is nil is reported as not given, an empty one as an empty list.
func (r RedisConfig) Validate() error {
	var errs []error
	bad := func(field, want, got string) {
		errs = append(errs, &FieldError{Field: field, Want: want, Got: got})
	}
	because := func(field, reason string) { errs = append(errs, &FieldError{Field: field, Reason: reason}) }
	if !validRedisURL(r.URL) {
		got := r.URL
		if u, err := url.Parse(r.URL); err == nil {
			got = u.Redacted()
		}
		bad("redis.url", WantRedisURL, strconv.Quote(got))
	}
	var given []string
	for _, g := range []struct {
		field string
		set   bool
	}{{"redis.url", r.URL != ""}, {"redis.sentinel", r.Sentinel != nil}, {"redis.cluster", r.Cluster != nil}} {
		if g.set {
			given = append(given, g.field)
		}
	}
	if len(given) > 1 {
		errs = append(errs, &FieldError{Field: given[1], Other: given[0],
			Reason: "give one of redis.url (one server), redis.sentinel (a Sentinel-managed master) and redis.cluster (a Redis Cluster), not " + given[0] + " too"})
	}
	if s := r.Sentinel; s != nil {
		if s.MasterName == "" {
			bad("redis.sentinel.master_name", "the master's name as the sentinels monitor it", "nothing")
		}
		errs = append(errs, validAddrs("redis.sentinel.addrs", "a list of sentinel addresses (host:port)", s.Addrs)...)
		if s.Username != "" && s.Password == "" {
			because("redis.sentinel.username", "a sentinel user name needs redis.sentinel.password")
		}
	}
	if c := r.Cluster; c != nil {
		errs = append(errs, validAddrs("redis.cluster.addrs", "a list of cluster node addresses (host:port)", c.Addrs)...)
	}
	if r.Username != "" && r.Password == "" {
		because("redis.username", "a user name needs redis.password")
	}
	if r.URL != "" && (r.Username != "" || r.Password != "") {
		if u, err := url.Parse(r.URL); err == nil && u.User != nil {
			field := "redis.password"
			if r.Username != "" {
				field = "redis.username"
			}
			because(field, "redis.url carries credentials too: give them in one place")
		}
	}
	if t := r.TLS; t != nil {
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			because("redis.tls.cert_file", "a client certificate needs redis.tls.key_file")
		case t.KeyFile != "" && t.CertFile == "":
			because("redis.tls.key_file", "a client key needs redis.tls.cert_file")
		}
		if strings.HasPrefix(r.URL, "unix:") {
			because("redis.tls", "TLS over a unix socket: use a redis:// or rediss:// URL")
		}
		if !r.Shared() {
			because("redis.tls", "TLS without a server: give redis.url, redis.sentinel or redis.cluster")
		}
	}
	if r.Timeout <= 0 {
		bad("redis.timeout", "a positive duration", strconv.Quote(r.Timeout.String()))
	}
	return errors.Join(errs...)
}

// validRedisURL accepts "" (no Redis: the in-memory store) and the URL
// forms that go-redis parses. It checks only the scheme and that there is
// something to connect to; the client reports the rest when it connects.
func validRedisURL(s string) bool {
	if s == "" {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && (((u.Scheme == "redis" || u.Scheme == "rediss") && u.Host != "") || (u.Scheme == "unix" && u.Path != ""))
}

// validAddrs checks a non-empty list of host:port addresses, each with a
// host and a port from 1.
func validAddrs(field, want string, addrs []string) []error {
	switch {
	case addrs == nil:
		return []error{&FieldError{Field: field, Want: want, Got: "none"}}
	case len(addrs) == 0:
		return []error{&FieldError{Field: field, Want: "at least one host:port address", Got: "an empty list"}}
	}
	var errs []error
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
			errs = append(errs, &FieldError{Field: field + "[" + strconv.Itoa(i) + "]", Want: WantRedisAddr, Got: strconv.Quote(a)})
		}
	}
	return errs
}
