// Package config is Spillway's configuration: the YAML file,
// SPILLWAY_… environment overrides and command-line flags, validated into
// the values the admitter and the worker run with. docs/configuration.md
// is the reference of every setting, its default and its environment
// variable; docs/design.md#configuration says what they mean.
//
// # Shape
//
// Load reads a file and returns a *Config whose every field is validated and
// defaulted: limits are built bucket.Limits, backlogs are queue.Configs,
// retries are retry.Policys, handlers are handler.Configs. A Config is
// immutable once loaded; a reload builds a new one and swaps it in whole
// (cli.Watcher).
//
// # Precedence
//
// Flags > environment > file > defaults. Load reads the file, fills what it
// leaves out with the defaults, then applies the environment variables that
// are set and not empty (EnvVars lists them), then the Overrides that are
// not nil (main sets them from its flags).
//
// # Decoding
//
// yaml.v3 parses the file into its node tree (yamlpos.Parse, which gives
// a syntax error its line), which one walk decodes into tagged structs,
// one per mapping, unknown fields and keys given twice refused, anchors,
// aliases and merge keys followed as yaml.v3 does (internal/yamlpos); each
// leaf keeps its node, so that every problem has its line. The rules of
// limits, backlogs, retry policies, handlers and the Redis connection are
// their owners' (bucket.Spec.Build, queue.Config.ValidateGiven,
// retry.Policy.ValidateGiven, handler.Config.Validate,
// conn.RedisConfig.Validate): config calls them and places their problems
// at the fields they name. The rules here are the configuration's own:
// names, addresses, tier names and keys, what a file may give once.
//
// # Errors
//
// Load reports every problem it finds, not only the first, as a
// *ValidationError: one line per problem, each naming where the value came
// from, the setting, and what was expected:
//
//	spillway.yaml:12: queues[0].limits[1].rate: expected a rate such as "10/s", got "ten"
//	spillway.yaml:4: redis.failuremode: unknown field (did you mean failure_mode?)
//	environment: SPILLWAY_REDIS_TIMEOUT: expected a Go duration such as "1s" or "5m", got "fast"
//
// # Dev mode
//
// Dev is the built-in configuration of `admitter --dev` without --config:
// one queue "demo" (leaky_bucket 5/s, burst 20, delay 5 per X-Client-Id,
// on_missing: shared, backlog 100 drained at 5/s, a handler that logs).
// LoadDev chooses between it and a file.
package config
