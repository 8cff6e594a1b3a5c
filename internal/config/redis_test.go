package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRedisTopologies reads the three ways of naming Redis, with
// credentials and TLS.
func TestRedisTopologies(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `redis:
  sentinel:
    master_name: spill
    addrs: ["10.0.0.1:26379", "10.0.0.2:26379"]
    username: sent
    password: s3
  username: app
  password: pw
  tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, server_name: redis.internal}
`+minimal)
	r := c.Redis
	if !r.Shared() || r.URL != "" || r.Cluster != nil || r.Sentinel == nil {
		t.Fatalf("redis = %+v", r)
	}
	if s := r.Sentinel; s.MasterName != "spill" || !slices.Equal(s.Addrs, []string{"10.0.0.1:26379", "10.0.0.2:26379"}) ||
		s.Username != "sent" || s.Password != "s3" {
		t.Errorf("sentinel = %+v", s)
	}
	if r.Username != "app" || r.Password != "pw" {
		t.Errorf("credentials = %q %q", r.Username, r.Password)
	}
	if r.TLS == nil || r.TLS.CAFile != filepath.Join(".", "ca.pem") || r.TLS.CertFile != "c.pem" || r.TLS.KeyFile != "k.pem" ||
		r.TLS.ServerName != "redis.internal" {
		t.Errorf("tls = %+v", r.TLS)
	}

	c = mustLoad(t, "redis:\n  cluster: {addrs: [\"n1:7000\", \"[::1]:7001\"]}\n"+minimal)
	if c.Redis.Cluster == nil || !slices.Equal(c.Redis.Cluster.Addrs, []string{"n1:7000", "[::1]:7001"}) || c.Redis.TLS != nil {
		t.Errorf("cluster = %+v", c.Redis)
	}
	if !c.Redis.SameConnection(c.Redis.RedisConfig) || c.Redis.SameConnection(r.RedisConfig) {
		t.Error("SameConnection")
	}
	if mustLoad(t, minimal).Redis.Shared() {
		t.Error("no redis section is shared")
	}
}

func TestRedisProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src string
		want      []string
	}{
		{"url and cluster", "redis:\n  url: redis://r:6379/0\n  cluster: {addrs: [\"n:7000\"]}\n",
			[]string{`spillway.yaml:3: redis.cluster: give one of redis.url (one server), redis.sentinel (a Sentinel-managed master) and redis.cluster (a Redis Cluster), not redis.url too (line 2)`}},
		{"sentinel without master", "redis:\n  sentinel: {addrs: [\"s:26379\"]}\n",
			[]string{`spillway.yaml:2: redis.sentinel.master_name: missing: expected the master's name as the sentinels monitor it`}},
		{"sentinel without addrs", "redis:\n  sentinel: {master_name: m}\n",
			[]string{`spillway.yaml:2: redis.sentinel.addrs: missing: expected a list of sentinel addresses (host:port)`}},
		{"bad addresses", "redis:\n  cluster:\n    addrs: [\"n\", \"n:0\", {a: b}]\n",
			[]string{
				`spillway.yaml:3: redis.cluster.addrs[0]: expected a host:port address such as "10.0.0.5:26379", got "n"`,
				`spillway.yaml:3: redis.cluster.addrs[1]: expected a host:port address such as "10.0.0.5:26379", got "n:0"`,
				`spillway.yaml:3: redis.cluster.addrs[2]: expected a host:port address such as "10.0.0.5:26379", got a mapping`,
			}},
		{"null address", "redis:\n  cluster:\n    addrs: [~, \"n:1\"]\n",
			[]string{`spillway.yaml:3: redis.cluster.addrs[0]: expected a host:port address such as "10.0.0.5:26379", got nothing`}},
		{"empty addrs", "redis:\n  cluster: {addrs: []}\n",
			[]string{`spillway.yaml:2: redis.cluster.addrs: expected at least one host:port address, got an empty list`}},
		{"user without password", "redis:\n  url: redis://r:6379/0\n  username: app\n",
			[]string{`spillway.yaml:3: redis.username: a user name needs redis.password`}},
		{"credentials twice", "redis:\n  url: redis://:x@r:6379/0\n  password: y\n",
			[]string{`spillway.yaml:3: redis.password: redis.url carries credentials too: give them in one place`}},
		{"cert without key", "redis:\n  url: redis://r:6379/0\n  tls: {cert_file: c.pem}\n",
			[]string{`spillway.yaml:3: redis.tls.cert_file: a client certificate needs redis.tls.key_file`}},
		{"tls without server", "redis:\n  tls: {ca_file: ca.pem}\n",
			[]string{`spillway.yaml:2: redis.tls: TLS without a server: give redis.url, redis.sentinel or redis.cluster`}},
		{"unknown sentinel field", "redis:\n  sentinel: {master: m, addrs: [\"s:1\"], master_name: m}\n",
			[]string{`spillway.yaml:2: redis.sentinel.master: unknown field (did you mean master_name?)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := problems(t, tt.src+minimal)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestRedisURLOverrideConflicts: SPILLWAY_REDIS_URL cannot silently replace
// a Sentinel or a cluster of the file.
func TestRedisURLOverrideConflicts(t *testing.T) {
	t.Parallel()
	src := "redis:\n  cluster: {addrs: [\"n:7000\"]}\n" + minimal
	_, err := LoadBytes("spillway.yaml", []byte(src), mapEnv{"SPILLWAY_REDIS_URL": "redis://r:6379/0"}.get, Overrides{})
	if err == nil || !strings.Contains(err.Error(), "SPILLWAY_REDIS_URL: the file configures redis.sentinel or redis.cluster") {
		t.Fatalf("err = %v", err)
	}
}
