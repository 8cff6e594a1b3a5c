package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// wantRedisAddr is what an address of redis.sentinel.addrs or
// redis.cluster.addrs must look like.
const wantRedisAddr = `a host:port address such as "10.0.0.5:26379"`

// redis reads redis.url, redis.sentinel, redis.cluster and their
// credentials and TLS into c: at most one of url, sentinel and cluster.
func (d *decoder) redis(r *redisDoc, c *Redis) {
	d.str(&r.URL, &c.URL, checkRedisURL)
	given := []*field{}
	for _, f := range []*field{&r.URL, &r.Sentinel.field, &r.Cluster.field} {
		if f.val != nil {
			given = append(given, f)
		}
	}
	if len(given) > 1 {
		d.errorf(given[1], "give one of redis.url (one server), redis.sentinel (a Sentinel-managed master) and redis.cluster (a Redis Cluster), not %s too (line %d)",
			given[0].path, given[0].at().Line)
	}
	if r.Sentinel.val != nil && r.Sentinel.val.Kind == yaml.MappingNode {
		s := &r.Sentinel.doc
		st := &RedisSentinel{}
		if d.given(&s.MasterName, "the master's name as the sentinels monitor it") {
			d.str(&s.MasterName, &st.MasterName, func(v string) error {
				if v == "" {
					return fmt.Errorf("expected the master's name as the sentinels monitor it, got nothing")
				}
				return nil
			})
		}
		if d.given(&s.Addrs, "a list of sentinel addresses (host:port)") {
			st.Addrs = d.redisAddrs(&s.Addrs)
		}
		d.str(&s.Username, &st.Username, nil)
		d.str(&s.Password, &st.Password, nil)
		if st.Username != "" && st.Password == "" {
			d.errorf(&s.Username, "a sentinel user name needs redis.sentinel.password")
		}
		c.Sentinel = st
	}
	if r.Cluster.val != nil && r.Cluster.val.Kind == yaml.MappingNode {
		cl := &RedisCluster{}
		if d.given(&r.Cluster.doc.Addrs, "a list of cluster node addresses (host:port)") {
			cl.Addrs = d.redisAddrs(&r.Cluster.doc.Addrs)
		}
		c.Cluster = cl
	}
	d.str(&r.Username, &c.Username, nil)
	d.str(&r.Password, &c.Password, nil)
	if c.Username != "" && c.Password == "" {
		d.errorf(&r.Username, "a user name needs redis.password")
	}
	if c.URL != "" && (c.Username != "" || c.Password != "") {
		if u, err := url.Parse(c.URL); err == nil && u.User != nil {
			f := &r.Password
			if c.Username != "" {
				f = &r.Username
			}
			d.errorf(f, "redis.url carries credentials too: give them in one place")
		}
	}
	if r.TLS.val != nil && r.TLS.val.Kind == yaml.MappingNode {
		t := &r.TLS.doc
		tc := &RedisTLS{}
		d.filename(&t.CAFile, &tc.CAFile)
		d.filename(&t.CertFile, &tc.CertFile)
		d.filename(&t.KeyFile, &tc.KeyFile)
		d.str(&t.ServerName, &tc.ServerName, nil)
		switch {
		case tc.CertFile != "" && tc.KeyFile == "":
			d.errorf(&t.CertFile, "a client certificate needs redis.tls.key_file")
		case tc.KeyFile != "" && tc.CertFile == "":
			d.errorf(&t.KeyFile, "a client key needs redis.tls.cert_file")
		}
		if strings.HasPrefix(c.URL, "unix:") {
			d.errorf(&r.TLS.field, "TLS over a unix socket: use a redis:// or rediss:// URL")
		}
		c.TLS = tc
	}
	if r.TLS.val != nil && !c.Shared() {
		d.errorf(&r.TLS.field, "TLS without a server: give redis.url, redis.sentinel or redis.cluster")
	}
}

// redisAddrs reads a non-empty list of host:port addresses.
func (d *decoder) redisAddrs(f *field) []string {
	items := d.items(f, "host:port addresses")
	if f.val != nil && f.val.Kind == yaml.SequenceNode && len(items) == 0 {
		d.errorf(f, "expected at least one host:port address, got an empty list")
	}
	var out []string
	for i, item := range items {
		path := fmt.Sprintf("%s[%d]", f.path, i)
		if item == nil || item.Kind != yaml.ScalarNode || isNull(item) {
			d.addf(orNode(item, f.val), path, "expected %s, got %s", wantRedisAddr, describe(item))
			continue
		}
		if err := checkRedisAddr(item.Value); err != nil {
			d.addf(item, path, "%v", err)
			continue
		}
		out = append(out, item.Value)
	}
	return out
}

// checkRedisAddr accepts host:port with a port of 1 to 65535.
func checkRedisAddr(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return expected(wantRedisAddr, s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return expected(wantRedisAddr, s)
	}
	return nil
}
