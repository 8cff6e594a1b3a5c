package conn

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestRedisConfigValidate names each problem's field as the configuration
// file does, with what was expected or why.
func TestRedisConfigValidate(t *testing.T) {
	t.Parallel()
	ok := RedisConfig{URL: "redis://r:6379/0", Timeout: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for _, tt := range []struct {
		name string
		c    RedisConfig
		want []string
	}{
		{"url", RedisConfig{URL: "http://u:p@host", Timeout: 1}, []string{`redis.url: expected ` + WantRedisURL + `, got "http://u:xxxxx@host"`}},
		{"two topologies", RedisConfig{URL: "redis://r:1", Cluster: &RedisCluster{Addrs: []string{"n:1"}}, Timeout: 1},
			[]string{"redis.cluster: give one of redis.url (one server), redis.sentinel (a Sentinel-managed master) and redis.cluster (a Redis Cluster), not redis.url too"}},
		{"sentinel", RedisConfig{Sentinel: &RedisSentinel{Addrs: []string{"s", "s:0"}, Username: "u"}, Timeout: 1}, []string{
			`redis.sentinel.master_name: expected the master's name as the sentinels monitor it, got nothing`,
			`redis.sentinel.addrs[0]: expected ` + WantRedisAddr + `, got "s"`,
			`redis.sentinel.addrs[1]: expected ` + WantRedisAddr + `, got "s:0"`,
			`redis.sentinel.username: a sentinel user name needs redis.sentinel.password`,
		}},
		{"no addresses", RedisConfig{Cluster: &RedisCluster{}, Timeout: 1}, []string{`redis.cluster.addrs: expected a list of cluster node addresses (host:port), got none`}},
		{"empty addresses", RedisConfig{Cluster: &RedisCluster{Addrs: []string{}}, Timeout: 1}, []string{`redis.cluster.addrs: expected at least one host:port address, got an empty list`}},
		{"credentials", RedisConfig{URL: "redis://:x@r:1", Username: "u", Timeout: 1}, []string{
			"redis.username: a user name needs redis.password",
			"redis.username: redis.url carries credentials too: give them in one place",
		}},
		{"tls", RedisConfig{URL: "unix:///s.sock", TLS: &RedisTLS{KeyFile: "k.pem"}, Timeout: 1}, []string{
			"redis.tls.key_file: a client key needs redis.tls.cert_file",
			"redis.tls: TLS over a unix socket: use a redis:// or rediss:// URL",
		}},
		{"tls without a server", RedisConfig{TLS: &RedisTLS{}, Timeout: 1}, []string{"redis.tls: TLS without a server: give redis.url, redis.sentinel or redis.cluster"}},
		{"timeout", RedisConfig{}, []string{`redis.timeout: expected a positive duration, got "0s"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, e := range tt.c.Validate().(interface{ Unwrap() []error }).Unwrap() {
				fe, ok := errors.AsType[*FieldError](e)
				if !ok || !errors.Is(e, ErrInvalidRedis) {
					t.Fatalf("%v: not a *FieldError wrapping ErrInvalidRedis", e)
				}
				got = append(got, fe.Field+": "+fe.Problem())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
