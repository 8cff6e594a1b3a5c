package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/internal/yamlpos"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// minimal is the smallest valid file; tests append to it or replace parts.
const minimal = `queues:
  - name: q
    limits: [{key: global, rate: 1/s}]
    backlog: {leak_rate: 1/s}
`

// problems loads src as spillway.yaml and returns its problems, one line
// each; nil if it is valid.
func problems(t *testing.T, src string) []string {
	t.Helper()
	_, err := LoadBytes("spillway.yaml", []byte(src), nil, Overrides{})
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("load: %v, want a *ValidationError", err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("load: errors.Is(err, ErrInvalid) = false")
	}
	return strings.Split(err.Error(), "\n")
}

func mustLoad(t *testing.T, src string) *Config {
	t.Helper()
	c, err := LoadBytes("spillway.yaml", []byte(src), nil, Overrides{})
	if err != nil {
		t.Fatalf("load:\n%v", err)
	}
	return c
}

// TestDesignExample loads the example file of docs/design.md#configuration and checks every
// value it sets and every default it leaves.
func TestDesignExample(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/spillway.yaml", nil, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Source != "testdata/spillway.yaml" {
		t.Errorf("Source = %q", c.Source)
	}
	wantTop := Config{
		Source: "testdata/spillway.yaml",
		NATS:   NATS{NATSConfig: conn.NATSConfig{URL: "nats://127.0.0.1:4222"}, Listen: DefaultNATSListen, Replicas: 1, ReplyPrefix: DefaultReplyPrefix},
		Redis:  Redis{RedisConfig: conn.RedisConfig{URL: "redis://127.0.0.1:6379/0", Timeout: 50 * time.Millisecond}, FailureMode: FailOpen},
		HTTP:   HTTP{Listen: ":8080", MaxBodyBytes: 1048576, MaxInflightBytes: DefaultMaxInflightBytes, WriteTimeout: DefaultWriteTimeout},
		Worker: Worker{Concurrency: worker.DefaultConcurrency, GracePeriod: 30 * time.Second, AckWait: 30 * time.Second},
		Status: Status{TTL: 24 * time.Hour},
	}
	top := *c
	top.Queues = nil
	if !reflect.DeepEqual(top, wantTop) {
		t.Errorf("settings:\n got %+v\nwant %+v", top, wantTop)
	}

	if len(c.Queues) != 1 {
		t.Fatalf("%d queues, want 1", len(c.Queues))
	}
	q := c.Queue("email")
	if q == nil {
		t.Fatal(`Queue("email") = nil`)
	}
	if len(q.Limits) != 2 {
		t.Fatalf("%d limits, want 2", len(q.Limits))
	}
	for i, want := range []struct {
		key   Key
		limit string
		rate  bucket.Rate
	}{
		{Key{Kind: KeyHeader, Header: "X-Api-Key"}, "leaky_bucket rate=10/s burst=20 delay=5", bucket.Rate{Count: 10, Per: time.Second}},
		{Key{Kind: KeyGlobal}, "token_bucket rate=500/s burst=1000", bucket.Rate{Count: 500, Per: time.Second}},
	} {
		l := q.Limits[i]
		if l.Key != want.key || l.Limit.String() != want.limit || l.Limit.Rate() != want.rate || !l.Limit.Valid() {
			t.Errorf("limits[%d] = %v %v (rate %v), want %v %v (rate %v)", i, l.Key, l.Limit, l.Limit.Rate(), want.key, want.limit, want.rate)
		}
	}
	wantBacklog := queue.Config{
		Name: "email", Capacity: 10000, PerKeyCapacity: 500, ReadyCapacity: queue.DefaultReadyCapacity, Replicas: 1,
		DuplicateWindow: queue.DefaultDuplicateWindow, LeakRate: bucket.Rate{Count: 50, Per: time.Second}, MaxAge: time.Hour,
		MaxDelay: queue.DefaultMaxDelay,
	}
	if !reflect.DeepEqual(q.Backlog, wantBacklog) {
		t.Errorf("backlog:\n got %+v\nwant %+v", q.Backlog, wantBacklog)
	}
	if want := (retry.Policy{MaxAttempts: 5, Initial: time.Second, Max: 5 * time.Minute, Jitter: retry.DefaultJitter}); q.Retry != want {
		t.Errorf("retry = %+v, want %+v", q.Retry, want)
	}
	want := handler.Config{HTTP: &handler.HTTPConfig{URL: "http://127.0.0.1:9000/send", Timeout: 10 * time.Second}}
	if !reflect.DeepEqual(q.Handler, want) {
		t.Errorf("handler = %+v, want %+v", q.Handler, want)
	}
}

// TestDefaults checks what a file leaves out.
func TestDefaults(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, minimal)
	want := defaults()
	want.Source = "spillway.yaml"
	want.Queues = c.Queues
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	if c.Redis.FailureMode != FailOpen || c.NATS.URL != DefaultNATSURL || c.HTTP.Listen != DefaultHTTPListen ||
		c.HTTP.MaxBodyBytes != DefaultMaxBodyBytes || c.HTTP.MaxInflightBytes != DefaultMaxInflightBytes || c.HTTP.WriteTimeout != DefaultWriteTimeout || c.Redis.Timeout != DefaultStoreTimeout || c.Status.TTL != DefaultStatusTTL {
		t.Errorf("defaults: %+v", c)
	}
	q := c.Queues[0]
	if q.Backlog.Capacity != queue.DefaultCapacity || q.Backlog.PerKeyCapacity != 0 || q.Backlog.Replicas != 1 ||
		q.Backlog.DuplicateWindow != queue.DefaultDuplicateWindow || q.Backlog.MaxAge != 0 {
		t.Errorf("backlog defaults: %+v", q.Backlog)
	}
	if q.Retry != (retry.Policy{MaxAttempts: retry.DefaultMaxAttempts, Initial: retry.DefaultInitial, Max: retry.DefaultMax, Jitter: retry.DefaultJitter}) {
		t.Errorf("retry defaults: %+v", q.Retry)
	}
	if q.Handler != (handler.Config{}) {
		t.Errorf("handler = %+v, want none (admit-only)", q.Handler)
	}
	if got := q.Limits[0].Limit.String(); got != "leaky_bucket rate=1/s burst=0 delay=0" {
		t.Errorf("limit = %s", got)
	}
}

// TestValues checks settings that are read and transformed.
func TestValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "spillway.yaml")
	src := `
x-backlog: &backlog {capacity: 50, leak_rate: 2/m}
nats: {url: "nats://a:4222, tls://b:4222", store_dir: data, creds_file: /etc/nats.creds, replicas: 3}
redis: {url: "unix:///run/redis.sock", failure_mode: local, timeout: 20ms}
http: {api_keys_file: keys.txt, admin_keys_file: admin-keys.txt, trusted_proxies: [10.1.2.3/8, 192.168.0.1, "::1", "::ffff:1.2.3.4"]}
worker: {concurrency: 4, grace_period: 0s, ack_wait: 1m}
status: {ttl: 1h}
queues:
  - name: a
    limits:
      - {key: "header: x-client-id", rate: 10r/s, burst: 4, nodelay: true}
      - {key: ip, algorithm: sliding_window, limit: 100, window: 1m}
      - {key: global, algorithm: fixed_window, limit: 1_000, window: 1h}
      - {key: "header:X-Tenant", algorithm: sliding_log, limit: 5, window: 10s}
    backlog: {<<: *backlog, per_key_capacity: 5}
    retry: {max_attempts: 1, jitter: 0}
    handler: {nats: {subject: jobs.a, timeout: 2s}}
  - name: b
    limits: [{key: global, rate: 1/s}]
    backlog: *backlog
    retry: {jitter: 0.5, initial: 2s, max: 1m}
    handler:
      log: true
  - name: c
    limits: [{key: global, rate: 1/s}]
    backlog: *backlog
    handler:
      http:
        url: https://example.test/hook
        headers: {authorization: "Bearer x", x-team: 7}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, nil, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.StoreDir != filepath.Join(dir, "data") || c.NATS.CredsFile != "/etc/nats.creds" || c.HTTP.APIKeysFile != filepath.Join(dir, "keys.txt") ||
		c.HTTP.AdminKeysFile != filepath.Join(dir, "admin-keys.txt") {
		t.Errorf("files are not relative to the config's directory: %+v %+v", c.NATS, c.HTTP)
	}
	if c.NATS.URL != "nats://a:4222, tls://b:4222" || c.NATS.Replicas != 3 {
		t.Errorf("nats = %+v", c.NATS)
	}
	if c.Redis != (Redis{RedisConfig: conn.RedisConfig{URL: "unix:///run/redis.sock", Timeout: 20 * time.Millisecond}, FailureMode: FailLocal}) {
		t.Errorf("redis = %+v", c.Redis)
	}
	wantProxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.1/32"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("1.2.3.4/32"),
	}
	if !reflect.DeepEqual(c.HTTP.TrustedProxies, wantProxies) {
		t.Errorf("trusted_proxies = %v, want %v", c.HTTP.TrustedProxies, wantProxies)
	}
	if c.Worker != (Worker{Concurrency: 4, GracePeriod: 0, AckWait: time.Minute}) || c.Status.TTL != time.Hour {
		t.Errorf("worker = %+v, status = %+v", c.Worker, c.Status)
	}

	a, b, cq := c.Queue("a"), c.Queue("b"), c.Queue("c")
	var limits []string
	for _, l := range a.Limits {
		limits = append(limits, l.Key.String()+" "+l.Limit.String())
	}
	wantLimits := []string{
		"header:X-Client-Id leaky_bucket rate=10/s burst=4 delay=4",
		"ip sliding_window limit=100 window=1m0s",
		"global fixed_window limit=1000 window=1h0m0s",
		"header:X-Tenant sliding_log limit=5 window=10s",
	}
	if !reflect.DeepEqual(limits, wantLimits) {
		t.Errorf("limits:\n got %q\nwant %q", limits, wantLimits)
	}
	if a.Backlog.Capacity != 50 || a.Backlog.PerKeyCapacity != 5 || a.Backlog.LeakRate != (bucket.Rate{Count: 2, Per: time.Minute}) || a.Backlog.Replicas != 3 {
		t.Errorf("backlog with merge key = %+v", a.Backlog)
	}
	if b.Backlog.Capacity != 50 || b.Backlog.Name != "b" {
		t.Errorf("backlog by alias = %+v", b.Backlog)
	}
	if a.Retry != (retry.Policy{MaxAttempts: 1, Initial: time.Second, Max: 5 * time.Minute, Jitter: -1}) {
		t.Errorf("retry with jitter 0 = %+v, want Jitter -1 (none)", a.Retry)
	}
	if b.Retry != (retry.Policy{MaxAttempts: 5, Initial: 2 * time.Second, Max: time.Minute, Jitter: 0.5}) {
		t.Errorf("retry = %+v", b.Retry)
	}
	if !reflect.DeepEqual(a.Handler, handler.Config{NATS: &handler.NATSConfig{Subject: "jobs.a", Timeout: 2 * time.Second}}) {
		t.Errorf("nats handler = %+v", a.Handler.NATS)
	}
	if !reflect.DeepEqual(b.Handler, handler.Config{Log: true}) {
		t.Errorf("log handler = %+v", b.Handler)
	}
	wantHTTP := &handler.HTTPConfig{URL: "https://example.test/hook", Timeout: handler.DefaultTimeout,
		Headers: map[string]string{"Authorization": "Bearer x", "X-Team": "7"}}
	if !reflect.DeepEqual(cq.Handler, handler.Config{HTTP: wantHTTP}) {
		t.Errorf("http handler = %+v", cq.Handler.HTTP)
	}
}

// TestProblems checks exact messages: each names the file, the line, the
// field, what was expected and what was found. Every problem of a file is
// reported, in line order.
func TestProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"rate", `queues:
  - name: email
    limits:
      - {key: global, rate: 10/s}
      - {key: ip, rate: ten}
    backlog: {leak_rate: 1/s}
`, []string{`spillway.yaml:5: queues[0].limits[1].rate: expected a rate such as "10/s", got "ten"`}},

		{"unknown field with a suggestion", "redis: {failuremode: open}\n" + minimal,
			[]string{`spillway.yaml:1: redis.failuremode: unknown field (did you mean failure_mode?)`}},
		{"unknown field in the wrong section", "queues:\n  - name: q\n    limits: [{key: global, rate: 1/s}]\n    leak_rate: 1/s\n",
			[]string{
				`spillway.yaml:2: queues[0].backlog.leak_rate: missing: expected a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one`,
				`spillway.yaml:4: queues[0].leak_rate: unknown field; leak_rate belongs under backlog`,
			}},
		{"unknown field without a suggestion", "metrics: {}\n" + minimal,
			[]string{`spillway.yaml:1: metrics: unknown field; expected one of nats, redis, http, worker, status or queues`}},
		{"field given twice", "http:\n  listen: :1\n  listen: :2\n" + minimal,
			[]string{`spillway.yaml:3: http.listen: given twice (first at line 2)`}},

		{"duplicate queue", minimal + "  - name: q\n    limits: [{key: global, rate: 1/s}]\n    backlog: {leak_rate: 1/s}\n",
			[]string{`spillway.yaml:5: queues[1].name: queue "q" is already defined at line 2`}},
		{"bad queue name", strings.Replace(minimal, "name: q", "name: a.b", 1),
			[]string{`spillway.yaml:2: queues[0].name: expected a name of 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-', got "a.b"`}},
		{"no queues", "nats: {}\n", []string{`spillway.yaml:1: queues: missing: expected a list of queues, at least one`}},
		{"empty file", "", []string{`spillway.yaml:1: queues: missing: expected a list of queues, at least one`}},
		{"queues not a list", "queues: {email: {}}\n",
			[]string{`spillway.yaml:1: queues: expected a list of queues, got a mapping`}},

		{"bad algorithm", strings.Replace(minimal, "rate: 1/s}]", "algorithm: leaky, rate: 1/s}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].algorithm: expected one of leaky_bucket, token_bucket, fixed_window, sliding_log or sliding_window, got "leaky" (did you mean leaky_bucket?)`}},
		{"delay > burst", strings.Replace(minimal, "rate: 1/s}]", "rate: 1/s, burst: 20, delay: 30}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].delay: must be between 0 and burst (20), got 30`}},
		{"delay and nodelay", strings.Replace(minimal, "rate: 1/s}]", "rate: 1/s, burst: 2, delay: 1, nodelay: true}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].delay: give delay or nodelay, not both, got 1`}},
		{"token bucket without burst", strings.Replace(minimal, "rate: 1/s}]", "algorithm: token_bucket, rate: 1/s}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].burst: missing: expected the token bucket's capacity, an integer ≥ 1`}},
		{"field of another algorithm", strings.Replace(minimal, "rate: 1/s}]", "algorithm: fixed_window, rate: 1/s, limit: 5, window: 1s}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].rate: fixed_window takes limit and window, not rate`}},
		{"window algorithm without window", strings.Replace(minimal, "rate: 1/s}]", "algorithm: sliding_log, limit: 5}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].window: missing: expected a Go duration such as "1s" or "5m"`}},
		{"no limits", strings.Replace(minimal, "    limits: [{key: global, rate: 1/s}]\n", "", 1),
			[]string{`spillway.yaml:2: queues[0].limits: missing: expected a list of limit tiers, such as [{key: global, rate: "10/s", burst: 20}]`}},
		{"empty limits", strings.Replace(minimal, "[{key: global, rate: 1/s}]", "[]", 1),
			[]string{`spillway.yaml:3: queues[0].limits: expected at least one limit tier, got an empty list`}},
		{"bad key", strings.Replace(minimal, "key: global", "key: Global", 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].key: expected "global", "ip" or "header:NAME", got "Global" (did you mean global?)`}},
		{"key with a header typo", strings.Replace(minimal, "key: global", `key: "headers:X-Api-Key"`, 1),
			[]string{`spillway.yaml:3: queues[0].limits[0].key: expected "global", "ip" or "header:NAME", got "headers:X-Api-Key" (did you mean header:X-Api-Key?)`}},
		{"header key without a name", strings.Replace(minimal, "key: global", `key: "header:"`, 1),
			[]string{"spillway.yaml:3: queues[0].limits[0].key: expected a header name after \"header:\" (letters, digits and !#$%&'*+-.^_`|~), got \"header:\""}},
		{"too many tiers", strings.Replace(minimal, "[{key: global, rate: 1/s}]",
			"[{key: ip, rate: 1/s}, {key: global, rate: 1/s}, {key: 'header:A', rate: 1/s}, {key: 'header:B', rate: 1/s}, {key: 'header:C', rate: 1/s}, {key: 'header:D', rate: 1/s}, {key: 'header:E', rate: 1/s}, {key: 'header:F', rate: 1/s}, {key: 'header:G', rate: 1/s}]", 1),
			[]string{`spillway.yaml:3: queues[0].limits: expected at most 8 limit tiers, got 9`}},

		{"no leak rate", strings.Replace(minimal, "backlog: {leak_rate: 1/s}", "backlog: {capacity: 5}", 1),
			[]string{`spillway.yaml:4: queues[0].backlog.leak_rate: missing: expected a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one`}},
		{"no backlog", strings.Replace(minimal, "    backlog: {leak_rate: 1/s}\n", "", 1),
			[]string{`spillway.yaml:2: queues[0].backlog.leak_rate: missing: expected a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one`}},
		{"per-key capacity above capacity", strings.Replace(minimal, "{leak_rate: 1/s}", "{leak_rate: 1/s, capacity: 10, per_key_capacity: 11}", 1),
			[]string{`spillway.yaml:4: queues[0].backlog.per_key_capacity: expected at most capacity (10), got 11`}},
		{"backlog sizes and durations", strings.Replace(minimal, "{leak_rate: 1/s}", "{leak_rate: 1/s, capacity: 0, max_age: -1s, duplicate_window: 0s}", 1),
			[]string{
				`spillway.yaml:4: queues[0].backlog.capacity: expected an integer ≥ 1, got "0"`,
				`spillway.yaml:4: queues[0].backlog.max_age: expected a duration ≥ 0, got "-1s"`,
				`spillway.yaml:4: queues[0].backlog.duplicate_window: expected a positive duration, got "0s"`,
			}},

		{"retry", minimal + "    retry: {max_attempts: 0, initial: 10m, jitter: 1.5}\n",
			[]string{
				`spillway.yaml:5: queues[0].retry.max_attempts: expected an integer ≥ 1, got "0"`,
				`spillway.yaml:5: queues[0].retry.initial: expected at most max (5m0s, the default), got 10m0s`,
				`spillway.yaml:5: queues[0].retry.jitter: expected a number from 0 to 1, got "1.5"`,
			}},

		{"two handlers", minimal + "    handler: {log: true, nats: {subject: a}}\n",
			[]string{`spillway.yaml:5: queues[0].handler: expected one kind of handler, got nats and log`}},
		{"empty handler", minimal + "    handler: {log: false}\n",
			[]string{`spillway.yaml:5: queues[0].handler: expected one of http, nats or log: true (leave handler out for an admit-only queue)`}},
		{"http handler", minimal + "    handler:\n      http:\n        url: \"ftp://x\"\n        timeout: 10\n        headers: {Spillway-Key: a, \"a b\": c, x-a: 1, X-A: 2}\n",
			[]string{
				`spillway.yaml:7: queues[0].handler.http.url: expected an http:// or https:// URL such as "http://127.0.0.1:9000/send", got "ftp://x"`,
				`spillway.yaml:8: queues[0].handler.http.timeout: expected a Go duration such as "1s" or "5m", got "10"`,
				`spillway.yaml:9: queues[0].handler.http.headers.Spillway-Key: header Spillway-Key is set by the worker for every job and cannot be configured`,
				"spillway.yaml:9: queues[0].handler.http.headers.a b: expected a header name (letters, digits and !#$%&'*+-.^_`|~), got \"a b\"",
				`spillway.yaml:9: queues[0].handler.http.headers.X-A: header X-A is already given at line 9`,
			}},
		{"nats handler", minimal + "    handler: {nats: {subject: \"jobs.>\"}}\n",
			[]string{`spillway.yaml:5: queues[0].handler.nats.subject: expected a NATS subject such as "jobs.email" (no spaces or wildcards), got "jobs.>"`}},

		{"sections", `nats: {url: "nats://a:1,http://b:2", listen: localhost, replicas: 7}
redis: {url: "localhost:6379", failure_mode: opn, timeout: 0s}
http: {listen: ":http", max_body_bytes: -1, max_inflight_bytes: 0, write_timeout: 0s, trusted_proxies: [10.0.0.0/33]}
worker: {concurrency: many, ack_wait: 1}
status: {ttl: [1h]}
` + minimal, []string{
			`spillway.yaml:1: nats.url: expected nats://, tls://, ws:// or wss:// URLs separated by commas, such as "nats://127.0.0.1:4222", got "nats://a:1,http://b:2"`,
			`spillway.yaml:1: nats.listen: expected host:port such as ":8080" or "127.0.0.1:8080", got "localhost"`,
			`spillway.yaml:1: nats.replicas: expected an integer from 1 to 5, got "7"`,
			`spillway.yaml:2: redis.url: expected a redis://, rediss:// or unix:// URL such as "redis://127.0.0.1:6379/0", got "localhost:6379"`,
			`spillway.yaml:2: redis.failure_mode: expected one of open, closed, local, got "opn" (did you mean open?)`,
			`spillway.yaml:2: redis.timeout: expected a positive duration, got "0s"`,
			`spillway.yaml:3: http.listen: expected host:port such as ":8080" or "127.0.0.1:8080", got ":http"`,
			`spillway.yaml:3: http.max_body_bytes: expected an integer ≥ 1, got "-1"`,
			`spillway.yaml:3: http.max_inflight_bytes: expected an integer ≥ 1, got "0"`,
			`spillway.yaml:3: http.write_timeout: expected a positive duration, got "0s"`,
			`spillway.yaml:3: http.trusted_proxies[0]: expected an IP address or a CIDR prefix such as "10.0.0.0/8", got "10.0.0.0/33"`,
			`spillway.yaml:4: worker.concurrency: expected an integer ≥ 1, got "many"`,
			`spillway.yaml:4: worker.ack_wait: expected a Go duration such as "1s" or "5m", got "1"`,
			`spillway.yaml:5: status.ttl: expected a Go duration such as "1s" or "5m", got a list`,
		}},
		{"password is not printed", "redis: {url: \"http://u:secret@host\"}\n" + minimal,
			[]string{`spillway.yaml:1: redis.url: expected a redis://, rediss:// or unix:// URL such as "redis://127.0.0.1:6379/0", got "http://u:xxxxx@host"`}},
		{"section not a mapping", "nats: nats://x:4222\n" + minimal,
			[]string{`spillway.yaml:1: nats: expected a mapping of url, listen, store_dir, creds_file, nkey_file, inbox_prefix, replicas and reply_prefix, got "nats://x:4222"`}},
		{"root not a mapping", "- a\n", []string{`spillway.yaml:1: expected a mapping of nats, redis, http, worker, status and queues, got a list`}},
		{"null queue and tier", "queues:\n  - name: a\n    limits: [~]\n    backlog: {leak_rate: 1/s}\n  -\n",
			[]string{
				`spillway.yaml:3: queues[0].limits[0]: expected a limit tier (a mapping of key, algorithm, rate, burst, delay, nodelay, limit, window, name, on_missing, mode and overrides), got nothing`,
				`spillway.yaml:5: queues[1]: expected a queue (a mapping of name, limits, backlog, ready, retry, handler and concurrency), got nothing`,
			}},

		// yaml.v3 counts parser errors' lines from 0 and scanner errors'
		// from 1, and leaves out the first line; the messages agree.
		{"scanner error", "x: 1\na: b: c\n", []string{`spillway.yaml:2: invalid YAML: mapping values are not allowed in this context`}},
		{"scanner error on line 1", "a: b: c\n", []string{`spillway.yaml:1: invalid YAML: mapping values are not allowed in this context`}},
		{"parser error", "x: 1\ny: 2\nz: [abc\n", []string{`spillway.yaml:3: invalid YAML: did not find expected ',' or ']'`}},
		{"parser error in a block", "x: 1\nqueues:\n  - a\n  b: 1\n", []string{`spillway.yaml:3: invalid YAML: did not find expected '-' indicator`}},
		{"unknown anchor", "x: 1\nqueues: *nope\n", []string{`spillway.yaml:2: invalid YAML: unknown anchor 'nope' referenced`}},
		{"tab", "queues:\n\t- a\n", []string{`spillway.yaml:2: invalid YAML: found character that cannot start any token`}},
		{"invalid UTF-8", "x: 1\ny: \xff\n", []string{`spillway.yaml:2: invalid UTF-8 (byte 0xff); the file must be UTF-8 text`}},
		{"control character", "x: 1\n\ny: \x01\n", []string{`spillway.yaml:3: control character U+0001 is not allowed in YAML`}},
		{"two documents", minimal + "---\nnats: {}\n", []string{`spillway.yaml:6: expected one YAML document, found a second one (a line "---" starts a new document)`}},
		{"key given twice in a queue", "queues:\n  - name: q\n    name: r\n    limits: [{key: global, rate: 1/s}]\n",
			[]string{`spillway.yaml:3: queues[0].name: given twice (first at line 2)`}},
		{"list items beside one that is not a mapping", "queues:\n  - 5\n  - name: q\n    limits: [{key: global, rate: ten}]\n    backlog: {leak_rate: 1/s}\n",
			[]string{
				`spillway.yaml:2: queues[0]: expected a mapping of name, limits, backlog, ready, retry, handler and concurrency, got "5"`,
				`spillway.yaml:4: queues[1].limits[0].rate: expected a rate such as "10/s", got "ten"`,
			}},
		{"unknown field in an anchor", "x-b: &b {leak_rate: 1/s, capacty: 5}\nqueues:\n  - name: q\n    limits: [{key: global, rate: 1/s}]\n    backlog: *b\n",
			[]string{`spillway.yaml:1: queues[0].backlog.capacty: unknown field (did you mean capacity?)`}},
		{"merge loop", "redis: &r {timeout: 1s, <<: *r}\n" + minimal, []string{`spillway.yaml:1: redis: anchor "r" holds an alias to itself (*r), which would never end`}},
		{"key that is not a name", "nats: {[a]: 1, ~: 2}\n" + minimal, []string{
			`spillway.yaml:1: nats: expected a field name, got a list`,
			`spillway.yaml:1: nats: expected a field name, got nothing`,
		}},
		{"alias to its own anchor", "queues:\n  - &q {name: a, limits: [*q], backlog: {leak_rate: 1/s}}\n",
			[]string{`spillway.yaml:2: queues[0].limits[0]: anchor "q" holds an alias to itself (*q), which would never end`}},
		{"unknown field in an anchor used twice", "x-b: &b {leak_rate: 1/s, capacty: 5}\nqueues:\n  - {name: a, limits: [{key: global, rate: 1/s}], backlog: *b}\n  - {name: b, limits: [{key: global, rate: 1/s}], backlog: {<<: *b}}\n",
			[]string{`spillway.yaml:1: queues[0].backlog.capacty: unknown field (did you mean capacity?)`}},
		{"merge of a scalar", "redis: {<<: 5}\n" + minimal, []string{`spillway.yaml:1: redis: expected a mapping or a list of mappings to merge (<<), got "5"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := problems(t, tt.src)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestAllProblemsReported checks that a file with many problems reports each
// once, in line order, as FieldErrors with their parts.
func TestAllProblemsReported(t *testing.T) {
	t.Parallel()
	src := `queues:
  - name: a
    limits: [{key: global, rate: x}]
    backlog: {leak_rate: y}
  - name: b
    limits: [{key: nope, rate: 1/s}]
    backlog: {leak_rate: 1/s, bogus: 1}
`
	_, err := LoadBytes("spillway.yaml", []byte(src), nil, Overrides{})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v", err)
	}
	var got []string
	for _, p := range ve.Problems {
		if p.Source != "spillway.yaml" {
			t.Errorf("Source = %q", p.Source)
		}
		got = append(got, fmt.Sprintf("%s@%d", p.Field, p.Line))
	}
	want := []string{
		"queues[0].limits[0].rate@3", "queues[0].backlog.leak_rate@4",
		"queues[1].limits[0].key@6", "queues[1].backlog.bogus@7",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems at %q, want %q", got, want)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Line != 3 {
		t.Errorf("errors.As(*FieldError) = %v", fe)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil, Overrides{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.yaml") || errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want a not-exist error naming the file", err)
	}
}

func TestDev(t *testing.T) {
	t.Parallel()
	c := Dev()
	if c.Source != "" || len(c.Queues) != 1 {
		t.Fatalf("Dev() = %+v", c)
	}
	q := c.Queue("demo")
	if q == nil || len(q.Limits) != 1 {
		t.Fatalf("demo queue = %+v", q)
	}
	l := q.Limits[0]
	if l.Key != (Key{Kind: KeyHeader, Header: "X-Client-Id"}) || l.Limit.String() != "leaky_bucket rate=5/s burst=20 delay=5" {
		t.Errorf("demo limit = %v %v", l.Key, l.Limit)
	}
	if q.Backlog.Capacity != 100 || q.Backlog.LeakRate != (bucket.Rate{Count: 5, Per: time.Second}) || q.Backlog.Name != "demo" {
		t.Errorf("demo backlog = %+v", q.Backlog)
	}
	if q.Handler != (handler.Config{Log: true}) {
		t.Errorf("demo handler = %+v", q.Handler)
	}
	if err := q.Backlog.Validate(); err != nil {
		t.Error(err)
	}
	if c2 := Dev(); c2 == c || &c2.Queues[0] == &c.Queues[0] {
		t.Error("Dev returns shared values")
	}
}

func TestLoadDev(t *testing.T) {
	t.Parallel()
	env := mapEnv{"SPILLWAY_REDIS_URL": "redis://r:6379/0"}
	c, err := LoadDev("", env.get, Overrides{HTTPListen: ptr("127.0.0.1:9999")})
	if err != nil {
		t.Fatal(err)
	}
	if c.Queue("demo") == nil || c.Redis.URL != "redis://r:6379/0" || c.HTTP.Listen != "127.0.0.1:9999" {
		t.Errorf("LoadDev(\"\") = %+v", c)
	}
	c, err = LoadDev("testdata/spillway.yaml", nil, Overrides{})
	if err != nil || c.Queue("email") == nil {
		t.Errorf("LoadDev(file) = %v, %v", c, err)
	}
	_, err = LoadDev("", mapEnv{"SPILLWAY_WORKER_CONCURRENCY": "0"}.get, Overrides{})
	if err == nil || err.Error() != `environment: SPILLWAY_WORKER_CONCURRENCY: expected an integer ≥ 1, got "0"` {
		t.Errorf("LoadDev with a bad environment: %v", err)
	}
}

// TestLimits checks the bounds that keep a hostile or broken file cheap: a
// small file of aliases that expands to millions of values, and a file of
// thousands of problems.
func TestLimits(t *testing.T) {
	t.Parallel()
	t.Run("alias expansion", func(t *testing.T) {
		t.Parallel()
		src := "x-l: &l {key: global, rate: 1/s}\n" +
			"x-q: &q {name: a, backlog: {leak_rate: 1/s}, limits: [" + strings.Repeat("*l, ", 2000) + "*l]}\n" +
			"queues: [" + strings.Repeat("*q, ", 2000) + "*q]\n"
		_, problems := parse("spillway.yaml", []byte(src), nil, Overrides{})
		if len(problems) == 0 || len(problems) > maxProblems+2 || problems[0].Error() != "spillway.yaml: "+yamlpos.TooManyValues {
			t.Errorf("%d problems, first %v", len(problems), problems[0])
		}
	})
	t.Run("many problems", func(t *testing.T) {
		t.Parallel()
		var b strings.Builder
		for i := range 150 {
			fmt.Fprintf(&b, "bad%d: 1\n", i)
		}
		got := problems(t, b.String()+minimal)
		if len(got) != maxProblems+1 || got[0] != "spillway.yaml:1: bad0: unknown field; expected one of nats, redis, http, worker, status or queues" ||
			got[maxProblems] != "spillway.yaml: 50 more problems not shown" {
			t.Errorf("%d problems: first %q, last %q", len(got), got[0], got[len(got)-1])
		}
	})
}

// TestDocExample loads the annotated file of docs/configuration.md, so
// that the reference cannot drift from the parser.
func TestDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "\n## File\n")
	if !ok {
		t.Fatal("docs/configuration.md has no File section")
	}
	_, after, _ = strings.Cut(after, "```yaml\n")
	src, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("docs/configuration.md has no yaml example under File")
	}
	c := mustLoad(t, src)
	q := c.Queue("email")
	if q == nil || len(q.Limits) != 1 || q.Handler.HTTP == nil || q.Handler.HTTP.Headers["Authorization"] != "Bearer x" || c.Redis.FailureMode != FailOpen {
		t.Errorf("doc example loaded as %+v", c)
	}
}

// Two tiers on one key are the common "10/s and 1000/h per API key".
func TestTiersMayShareAKey(t *testing.T) {
	t.Parallel()
	data := strings.Replace(minimal, "[{key: global, rate: 1/s}]",
		`[{key: "header:x-a", rate: 10/s, burst: 5}, {key: "header:X-A", algorithm: fixed_window, limit: 1000, window: 1h}]`, 1)
	cfg, errs := parse("spillway.yaml", []byte(data), nil, Overrides{})
	if len(errs) > 0 {
		t.Fatalf("parse: %v", errs)
	}
	ls := cfg.Queues[0].Limits
	if len(ls) != 2 || ls[0].Key != ls[1].Key || ls[0].Key.Header != "X-A" {
		t.Fatalf("limits = %+v, want two tiers keyed on header X-A", ls)
	}
}
