package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Overrides are settings given on the command line. A nil field is not
// given; a set one wins over the environment and the file. Its values are
// validated as the environment's are, and a problem names the setting
// (flags: worker.concurrency: …). Each field's tag is the setting it
// overrides, whose environment variable is SPILLWAY_ and the setting in
// capitals, dots as underscores.
type Overrides struct {
	NATSURL           *string        `setting:"nats.url"`
	NATSListen        *string        `setting:"nats.listen"`
	NATSCredsFile     *string        `setting:"nats.creds_file"`
	NATSNkeyFile      *string        `setting:"nats.nkey_file"`
	NATSInboxPrefix   *string        `setting:"nats.inbox_prefix"`
	RedisURL          *string        `setting:"redis.url"` // "" = the in-memory store
	RedisFailureMode  *FailureMode   `setting:"redis.failure_mode"`
	RedisTimeout      *time.Duration `setting:"redis.timeout"`
	HTTPListen        *string        `setting:"http.listen"`
	HTTPMaxBodyBytes  *int64         `setting:"http.max_body_bytes"`
	HTTPAPIKeysFile   *string        `setting:"http.api_keys_file"`   // "" = no authentication
	HTTPAdminKeysFile *string        `setting:"http.admin_keys_file"` // "" = no admin endpoints
	WorkerConcurrency *int           `setting:"worker.concurrency"`
	WorkerGracePeriod *time.Duration `setting:"worker.grace_period"`
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
	return LoadBytes(path, data, getenv, o)
}

// LoadDev is Load when path is not empty, and otherwise Dev with the
// environment and overrides applied: the configuration of `admitter --dev`.
func LoadDev(path string, getenv func(string) string, o Overrides) (*Config, error) {
	if path != "" {
		return Load(path, getenv, o)
	}
	c, err := LoadBytes(devSource, []byte(devYAML), getenv, o)
	if err == nil {
		c.Source = ""
	}
	return c, err
}

// LoadBytes is Load on a file's contents, data; path is the name its
// problems carry.
func LoadBytes(path string, data []byte, getenv func(string) string, o Overrides) (*Config, error) {
	c, problems := parse(path, data, getenv, o)
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return c, nil
}

// EnvVar is an environment variable that overrides a setting of the file.
type EnvVar struct {
	Name    string // SPILLWAY_REDIS_URL
	Setting string // redis.url
}

// EnvVars lists the environment variables Load reads, in the order of the
// file's settings (for --help and the docs).
func EnvVars() []EnvVar {
	t := reflect.TypeFor[Overrides]()
	vars := make([]EnvVar, t.NumField())
	for i := range vars {
		setting := t.Field(i).Tag.Get("setting")
		vars[i] = EnvVar{Name: "SPILLWAY_" + strings.ToUpper(strings.ReplaceAll(setting, ".", "_")), Setting: setting}
	}
	return vars
}

// override sets the document's leaves from the environment (an empty
// variable is unset) when o is nil, else from o's set fields. Their values
// are read as the file's are; their problems name the variable or the
// setting.
func (d *decoder) override(doc *rootDoc, getenv func(string) string, o *Overrides) {
	for i, v := range EnvVars() {
		s, src, field := "", SourceFlags, v.Setting
		if o == nil {
			s, src, field = getenv(v.Name), SourceEnv, v.Name
			if s == "" {
				continue
			}
		} else if f := reflect.ValueOf(o).Elem().Field(i); !f.IsNil() {
			s = fmt.Sprint(f.Elem().Interface())
		} else {
			continue
		}
		l := byTag(reflect.ValueOf(doc).Elem(), v.Setting)
		_ = l.(yaml.Unmarshaler).UnmarshalYAML(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
		d.pos[l] = at{path: field, src: src, col: i} // problems in the order of the settings
		if err := l.base().err; err != nil {
			d.add(d.pos[l], err.Error())
		}
	}
}
