package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// mapEnv is an environment for tests: getenv without touching the
// process's, so tests run in parallel.
type mapEnv map[string]string

func (e mapEnv) get(name string) string { return e[name] }

func ptr[T any](v T) *T { return &v }

// fileWithEverything sets every overridable setting, so that each override
// visibly replaces a file value rather than a default.
const fileWithEverything = `nats: {url: "nats://file:4222", listen: "127.0.0.1:1", creds_file: /file.creds}
redis: {url: "redis://file:6379", failure_mode: closed, timeout: 1s}
http: {listen: ":1", max_body_bytes: 1, api_keys_file: /file.keys}
worker: {concurrency: 1, grace_period: 1s}
` + minimal

// TestPrecedence checks flags > environment > file > defaults, setting by
// setting.
func TestPrecedence(t *testing.T) {
	t.Parallel()
	type settings struct {
		NATSURL, NATSListen, NATSCreds, RedisURL string
		Mode                                     FailureMode
		RedisTimeout                             time.Duration
		HTTPListen                               string
		MaxBody                                  int64
		APIKeys                                  string
		Concurrency                              int
		Grace                                    time.Duration
	}
	of := func(c *Config) settings {
		return settings{c.NATS.URL, c.NATS.Listen, c.NATS.CredsFile, c.Redis.URL, c.Redis.FailureMode, c.Redis.Timeout,
			c.HTTP.Listen, c.HTTP.MaxBodyBytes, c.HTTP.APIKeysFile, c.Worker.Concurrency, c.Worker.GracePeriod}
	}
	env := mapEnv{
		"SPILLWAY_NATS_URL":            "nats://env:4222",
		"SPILLWAY_NATS_LISTEN":         "127.0.0.1:2",
		"SPILLWAY_NATS_CREDS_FILE":     "env.creds",
		"SPILLWAY_REDIS_URL":           "rediss://env:6379",
		"SPILLWAY_REDIS_FAILURE_MODE":  "local",
		"SPILLWAY_REDIS_TIMEOUT":       "2s",
		"SPILLWAY_HTTP_LISTEN":         ":2",
		"SPILLWAY_HTTP_MAX_BODY_BYTES": "2",
		"SPILLWAY_HTTP_API_KEYS_FILE":  "env.keys",
		"SPILLWAY_WORKER_CONCURRENCY":  "2",
		"SPILLWAY_WORKER_GRACE_PERIOD": "2s",
	}
	flags := Overrides{
		NATSURL:           ptr("nats://flag:4222"),
		NATSListen:        ptr("127.0.0.1:3"),
		NATSCredsFile:     ptr(""),
		RedisURL:          ptr(""),
		RedisFailureMode:  ptr(FailOpen),
		RedisTimeout:      ptr(3 * time.Second),
		HTTPListen:        ptr(":3"),
		HTTPMaxBodyBytes:  ptr(int64(3)),
		HTTPAPIKeysFile:   ptr(""),
		WorkerConcurrency: ptr(3),
		WorkerGracePeriod: ptr(time.Duration(0)),
	}
	fileOnly := settings{"nats://file:4222", "127.0.0.1:1", "/file.creds", "redis://file:6379", FailClosed, time.Second,
		":1", 1, "/file.keys", 1, time.Second}
	envOverFile := settings{"nats://env:4222", "127.0.0.1:2", "env.creds", "rediss://env:6379", FailLocal, 2 * time.Second,
		":2", 2, "env.keys", 2, 2 * time.Second}
	flagsOverAll := settings{"nats://flag:4222", "127.0.0.1:3", "", "", FailOpen, 3 * time.Second, ":3", 3, "", 3, 0}
	defaultsOnly := settings{DefaultNATSURL, DefaultNATSListen, "", "", FailOpen, DefaultStoreTimeout,
		DefaultHTTPListen, DefaultMaxBodyBytes, "", 16, DefaultGracePeriod}

	for _, tt := range []struct {
		name  string
		file  string
		env   mapEnv
		flags Overrides
		want  settings
	}{
		{"defaults", minimal, nil, Overrides{}, defaultsOnly},
		{"file over defaults", fileWithEverything, nil, Overrides{}, fileOnly},
		{"environment over file", fileWithEverything, env, Overrides{}, envOverFile},
		{"environment over defaults", minimal, env, Overrides{}, envOverFile},
		{"flags over environment", fileWithEverything, env, flags, flagsOverAll},
		{"flags over file", fileWithEverything, nil, flags, flagsOverAll},
		{"empty variables are unset", fileWithEverything, mapEnv{"SPILLWAY_REDIS_URL": "", "SPILLWAY_HTTP_LISTEN": ""}, Overrides{}, fileOnly},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := LoadBytes("spillway.yaml", []byte(tt.file), tt.env.get, tt.flags)
			if err != nil {
				t.Fatal(err)
			}
			if got := of(c); got != tt.want {
				t.Errorf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestEnvProblems checks that a bad value in the environment or a flag is
// named by its variable or setting, and that all of them are reported with
// the file's own problems.
func TestEnvProblems(t *testing.T) {
	t.Parallel()
	env := mapEnv{
		"SPILLWAY_NATS_URL":            "localhost:4222",
		"SPILLWAY_REDIS_FAILURE_MODE":  "closd",
		"SPILLWAY_REDIS_TIMEOUT":       "fast",
		"SPILLWAY_HTTP_MAX_BODY_BYTES": "1MB",
		"SPILLWAY_WORKER_GRACE_PERIOD": "-1s",
	}
	flags := Overrides{WorkerConcurrency: ptr(0), HTTPListen: ptr("8080"), RedisFailureMode: ptr(FailureMode("x"))}
	_, err := LoadBytes("spillway.yaml", []byte(strings.Replace(minimal, "1/s}]", "x}]", 1)), env.get, flags)
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`spillway.yaml:3: queues[0].limits[0].rate: expected a rate such as "10/s", got "x"`,
		`environment: SPILLWAY_NATS_URL: expected nats://, tls://, ws:// or wss:// URLs separated by commas, such as "nats://127.0.0.1:4222", got "localhost:4222"`,
		`environment: SPILLWAY_REDIS_FAILURE_MODE: expected one of open, closed, local, got "closd" (did you mean closed?)`,
		`environment: SPILLWAY_REDIS_TIMEOUT: expected a Go duration such as "1s" or "5m", got "fast"`,
		`environment: SPILLWAY_HTTP_MAX_BODY_BYTES: expected an integer ≥ 1, got "1MB"`,
		`environment: SPILLWAY_WORKER_GRACE_PERIOD: expected a duration ≥ 0, got "-1s"`,
		`flags: redis.failure_mode: expected one of open, closed, local, got "x"`,
		`flags: http.listen: expected host:port such as ":8080" or "127.0.0.1:8080", got "8080"`,
		`flags: worker.concurrency: expected an integer ≥ 1, got "0"`,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEnvVars checks that the documented list is the one Load reads.
func TestEnvVars(t *testing.T) {
	t.Parallel()
	want := []string{
		"SPILLWAY_NATS_URL", "SPILLWAY_NATS_LISTEN", "SPILLWAY_NATS_CREDS_FILE", "SPILLWAY_NATS_NKEY_FILE", "SPILLWAY_NATS_INBOX_PREFIX",
		"SPILLWAY_REDIS_URL", "SPILLWAY_REDIS_FAILURE_MODE", "SPILLWAY_REDIS_TIMEOUT",
		"SPILLWAY_HTTP_LISTEN", "SPILLWAY_HTTP_MAX_BODY_BYTES", "SPILLWAY_HTTP_API_KEYS_FILE",
		"SPILLWAY_HTTP_ADMIN_KEYS_FILE", "SPILLWAY_WORKER_CONCURRENCY", "SPILLWAY_WORKER_GRACE_PERIOD",
	}
	var got []string
	for _, v := range EnvVars() {
		got = append(got, v.Name)
		if "SPILLWAY_"+strings.ToUpper(strings.ReplaceAll(v.Setting, ".", "_")) != v.Name {
			t.Errorf("%s overrides %s", v.Name, v.Setting)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("EnvVars() = %q, want %q", got, want)
	}
}

// TestEnvVarsDocumented checks that docs/configuration.md lists every
// variable with its setting.
func TestEnvVarsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range EnvVars() {
		if !regexp.MustCompile("(?m)^\\| `" + v.Name + "` \\| `" + regexp.QuoteMeta(v.Setting) + "` \\|$").Match(doc) {
			t.Errorf("docs/configuration.md does not list %s as overriding %s", v.Name, v.Setting)
		}
	}
}
