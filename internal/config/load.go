package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Overrides are settings given on the command line. A nil field is not
// given; a set one wins over the environment and the file. Its values are
// validated as the environment's are, and a problem names the setting
// (flags: worker.concurrency: …).
type Overrides struct {
	NATSURL           *string        // nats.url
	NATSListen        *string        // nats.listen
	NATSCredsFile     *string        // nats.creds_file
	RedisURL          *string        // redis.url ("" = the in-memory store)
	RedisFailureMode  *FailureMode   // redis.failure_mode
	RedisTimeout      *time.Duration // redis.timeout
	HTTPListen        *string        // http.listen
	HTTPMaxBodyBytes  *int64         // http.max_body_bytes
	HTTPAPIKeysFile   *string        // http.api_keys_file ("" = no authentication)
	HTTPAdminKeysFile *string        // http.admin_keys_file ("" = no admin endpoints)
	WorkerConcurrency *int           // worker.concurrency
	WorkerGracePeriod *time.Duration // worker.grace_period
}

// Load reads the configuration file at path, then applies the environment
// (getenv, normally os.Getenv; nil means none) and the overrides o, in that
// order: flags > environment > file > defaults.
//
// Every problem is reported, not only the first: the error is a
// *ValidationError whose lines each name the file, the line and the field
// (or the environment variable, or the flag's setting), and wraps
// ErrInvalid. Failing to read the file is an *fs.PathError instead.
func Load(path string, getenv func(string) string, o Overrides) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return load(path, data, getenv, o)
}

// LoadDev is Load when path is not empty, and otherwise Dev with the
// environment and overrides applied: the configuration of `admitter --dev`.
func LoadDev(path string, getenv func(string) string, o Overrides) (*Config, error) {
	if path != "" {
		return Load(path, getenv, o)
	}
	c := Dev()
	if problems := override(c, getenv, o); len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return c, nil
}

// load is Load on the file's bytes.
func load(path string, data []byte, getenv func(string) string, o Overrides) (*Config, error) {
	c, problems := parse(path, data)
	problems = append(problems, override(c, getenv, o)...)
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return c, nil
}

// setting is one setting that the environment and flags can override.
type setting struct {
	path string // in the file: redis.timeout
	env  string // SPILLWAY_REDIS_TIMEOUT
	// set validates a textual value and stores it in c.
	set func(c *Config, s string) error
	// flag is the override's value as text, if it is set.
	flag func(o *Overrides) (string, bool)
}

// settings are the overridable settings, in the order of the file.
var settings = []setting{
	{"nats.url", "SPILLWAY_NATS_URL",
		setString(func(c *Config) *string { return &c.NATS.URL }, checkNATSURL),
		func(o *Overrides) (string, bool) { return textOf(o.NATSURL) }},
	{"nats.listen", "SPILLWAY_NATS_LISTEN",
		setString(func(c *Config) *string { return &c.NATS.Listen }, checkListen),
		func(o *Overrides) (string, bool) { return textOf(o.NATSListen) }},
	{"nats.creds_file", "SPILLWAY_NATS_CREDS_FILE",
		setString(func(c *Config) *string { return &c.NATS.CredsFile }, nil),
		func(o *Overrides) (string, bool) { return textOf(o.NATSCredsFile) }},
	{"redis.url", "SPILLWAY_REDIS_URL",
		setRedisURL,
		func(o *Overrides) (string, bool) { return textOf(o.RedisURL) }},
	{"redis.failure_mode", "SPILLWAY_REDIS_FAILURE_MODE",
		setParsed(func(c *Config) *FailureMode { return &c.Redis.FailureMode }, parseFailureMode),
		func(o *Overrides) (string, bool) { return textOf(o.RedisFailureMode) }},
	{"redis.timeout", "SPILLWAY_REDIS_TIMEOUT",
		setDuration(func(c *Config) *time.Duration { return &c.Redis.Timeout }, true),
		func(o *Overrides) (string, bool) { return durationText(o.RedisTimeout) }},
	{"http.listen", "SPILLWAY_HTTP_LISTEN",
		setString(func(c *Config) *string { return &c.HTTP.Listen }, checkListen),
		func(o *Overrides) (string, bool) { return textOf(o.HTTPListen) }},
	{"http.max_body_bytes", "SPILLWAY_HTTP_MAX_BODY_BYTES",
		setInt(func(c *Config) *int64 { return &c.HTTP.MaxBodyBytes }, maxInt64),
		func(o *Overrides) (string, bool) { return intText(o.HTTPMaxBodyBytes) }},
	{"http.api_keys_file", "SPILLWAY_HTTP_API_KEYS_FILE",
		setString(func(c *Config) *string { return &c.HTTP.APIKeysFile }, nil),
		func(o *Overrides) (string, bool) { return textOf(o.HTTPAPIKeysFile) }},
	{"http.admin_keys_file", "SPILLWAY_HTTP_ADMIN_KEYS_FILE",
		setString(func(c *Config) *string { return &c.HTTP.AdminKeysFile }, nil),
		func(o *Overrides) (string, bool) { return textOf(o.HTTPAdminKeysFile) }},
	{"worker.concurrency", "SPILLWAY_WORKER_CONCURRENCY",
		setInt(func(c *Config) *int { return &c.Worker.Concurrency }, maxInt),
		func(o *Overrides) (string, bool) { return intText(o.WorkerConcurrency) }},
	{"worker.grace_period", "SPILLWAY_WORKER_GRACE_PERIOD",
		setDuration(func(c *Config) *time.Duration { return &c.Worker.GracePeriod }, false),
		func(o *Overrides) (string, bool) { return durationText(o.WorkerGracePeriod) }},
}

const maxInt64 = 1<<63 - 1

// EnvVar is an environment variable that overrides a setting of the file.
type EnvVar struct {
	Name    string // SPILLWAY_REDIS_URL
	Setting string // redis.url
}

// EnvVars lists the environment variables Load reads, in the order of the
// file's settings (for --help and the docs).
func EnvVars() []EnvVar {
	vars := make([]EnvVar, len(settings))
	for i, s := range settings {
		vars[i] = EnvVar{Name: s.env, Setting: s.path}
	}
	return vars
}

// override applies the environment, then the overrides, to c. An empty
// environment variable counts as unset.
func override(c *Config, getenv func(string) string, o Overrides) []*FieldError {
	var problems []*FieldError
	if getenv != nil {
		for _, s := range settings {
			if v := getenv(s.env); v != "" {
				if err := s.set(c, v); err != nil {
					problems = append(problems, &FieldError{Source: SourceEnv, Field: s.env, Problem: err.Error()})
				}
			}
		}
	}
	for _, s := range settings {
		if v, ok := s.flag(&o); ok {
			if err := s.set(c, v); err != nil {
				problems = append(problems, &FieldError{Source: SourceFlags, Field: s.path, Problem: err.Error()})
			}
		}
	}
	return problems
}

func setString(field func(*Config) *string, check func(string) error) func(*Config, string) error {
	return func(c *Config, s string) error {
		if check != nil {
			if err := check(s); err != nil {
				return err
			}
		}
		*field(c) = s
		return nil
	}
}

// setRedisURL overrides redis.url, which selects one server: a file that
// configures a Sentinel or a cluster instead is a conflict, not overridden.
func setRedisURL(c *Config, s string) error {
	if err := checkRedisURL(s); err != nil {
		return err
	}
	if s != "" && (c.Redis.Sentinel != nil || c.Redis.Cluster != nil) {
		return errors.New("the file configures redis.sentinel or redis.cluster: a URL would replace them; change the file instead")
	}
	c.Redis.URL = s
	return nil
}

// setParsed stores in field what parse makes of the value.
func setParsed[T any](field func(*Config) *T, parse func(string) (T, error)) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := parse(s)
		if err == nil {
			*field(c) = v
		}
		return err
	}
}

func setDuration(field func(*Config) *time.Duration, positive bool) func(*Config, string) error {
	return setParsed(field, func(s string) (time.Duration, error) { return parseDuration(s, positive) })
}

// setInt takes an integer from 1 to hi.
func setInt[T int | int64](field func(*Config) *T, hi int64) func(*Config, string) error {
	return setParsed(field, func(s string) (T, error) {
		n, err := parseInt(s, 1, hi)
		return T(n), err
	})
}

func textOf[T ~string](p *T) (string, bool) {
	if p == nil {
		return "", false
	}
	return string(*p), true
}

func durationText(p *time.Duration) (string, bool) {
	if p == nil {
		return "", false
	}
	return p.String(), true
}

func intText[T int | int64](p *T) (string, bool) {
	if p == nil {
		return "", false
	}
	return strconv.FormatInt(int64(*p), 10), true
}
