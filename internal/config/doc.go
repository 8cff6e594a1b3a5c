// Package config is Spillway's configuration: the YAML file of docs/design.md#configuration,
// SPILLWAY_… environment overrides and command-line flags, validated into
// the values the admitter and the worker run with.
//
// # Shape
//
// Load reads a file and returns a *Config whose every field is validated and
// defaulted: limits are built bucket.Limits, backlogs are queue.Configs,
// retries are retry.Policys. A Config is immutable once loaded; a reload
// builds a new one and swaps it in whole (Watcher).
//
// # Precedence
//
// Flags > environment > file > defaults. Load reads the file, fills what it
// leaves out with the defaults, then applies the environment variables that
// are set and not empty, then the Overrides that are not nil (main sets them
// from its flags). The variables and the settings they override:
//
//	SPILLWAY_NATS_URL              nats.url
//	SPILLWAY_NATS_LISTEN           nats.listen
//	SPILLWAY_NATS_CREDS_FILE       nats.creds_file
//	SPILLWAY_REDIS_URL             redis.url
//	SPILLWAY_REDIS_FAILURE_MODE    redis.failure_mode
//	SPILLWAY_REDIS_TIMEOUT         redis.timeout
//	SPILLWAY_HTTP_LISTEN           http.listen
//	SPILLWAY_HTTP_MAX_BODY_BYTES   http.max_body_bytes
//	SPILLWAY_HTTP_API_KEYS_FILE    http.api_keys_file
//	SPILLWAY_HTTP_ADMIN_KEYS_FILE  http.admin_keys_file
//	SPILLWAY_WORKER_CONCURRENCY    worker.concurrency
//	SPILLWAY_WORKER_GRACE_PERIOD   worker.grace_period
//
// # File
//
// Every field but queues is optional. Durations are Go durations ("1s",
// "5m"), rates are COUNT/UNIT ("10/s", "600/m", "5/10s"), sizes are
// integers. Relative file names in the file (nats.store_dir,
// nats.creds_file, http.api_keys_file, http.admin_keys_file) are relative to the file's
// directory; those from the environment and flags are used as given.
// YAML anchors, aliases and merge keys (<<) may be used to share settings
// between queues; top-level fields whose names start with "x-" are ignored,
// a place to define anchors (as in Compose files).
//
//	nats:
//	  url: nats://127.0.0.1:4222        # comma-separated nats://, tls://, ws://, wss:// URLs
//	  listen: 127.0.0.1:4222            # the embedded server of --dev
//	  store_dir: ""                     # --dev JetStream directory (default: temporary)
//	  creds_file: ""
//	  replicas: 1                       # of every stream, 1 to 5
//	redis:                              # no url, sentinel or cluster: the in-memory store of each process
//	  url: redis://127.0.0.1:6379/0     # redis://, rediss:// or unix://
//	  # sentinel: {master_name: m, addrs: ["s1:26379"], username: "", password: ""}  # instead of url
//	  # cluster: {addrs: ["n1:6379", "n2:6379"]}                                     # instead of url
//	  username: ""                      # ACL user of the data servers
//	  password: ""
//	  # tls: {ca_file: "", cert_file: "", key_file: "", server_name: ""}   # TLS to every server
//	  failure_mode: open                # open | closed | local
//	  timeout: 50ms                     # one decision's budget
//	http:
//	  listen: ":8080"
//	  max_body_bytes: 1048576
//	  api_keys_file: ""                 # one key per line; "" = no authentication
//	  admin_keys_file: ""               # keys for pause/resume, same format; "" = no admin endpoints
//	  trusted_proxies: [10.0.0.0/8]     # IPs or CIDRs whose X-Forwarded-For is believed
//	  show_raw_keys: false              # GET /v1/queues/{queue}/keys lists raw keys beside
//	                                    # their hashes (default false: hashes only)
//	worker: {concurrency: 16, grace_period: 30s, ack_wait: 30s}
//	status:
//	  ttl: 24h                          # how long a job's status is kept
//	  record_running: false             # write "running" at each try's start: a third status
//	                                    # write per job (default false: a job's record goes from
//	                                    # admitted to its outcome; a backlog job's start is
//	                                    # written all the same, for a cancel to race)
//	queues:                             # at least one; names unique
//	  - name: email                     # 1-64 of [A-Za-z0-9_-]
//	    limits:                         # 1 to 8 tiers, each with its own key
//	      - key: "header:X-Api-Key"     # global | ip | header:NAME
//	        name: per-key               # in RateLimit-Policy, RateLimit and messages; unique in
//	                                    # the queue; 1-64 of [A-Za-z0-9_.-] (default tier<i>)
//	        on_missing: reject          # header:NAME only, for a request without the header or
//	                                    # with it empty: reject (default: 400 bad-key naming
//	                                    # the header) | shared (one bucket for all of them)
//	        mode: enforce               # enforce (default) | shadow: decided at its own state as
//	                                    # if it enforced, answered in Spillway-Shadow and
//	                                    # counted, never refusing, queueing or delaying a job;
//	                                    # a queue needs one enforcing tier
//	                                    # (docs/design.md#shadow-tiers)
//	        algorithm: leaky_bucket     # leaky_bucket (default) | token_bucket |
//	                                    # fixed_window | sliding_log | sliding_window
//	        rate: 10/s                  # leaky_bucket, token_bucket
//	        burst: 20                   # leaky_bucket (default 0); token_bucket: capacity, required
//	        delay: 5                    # leaky_bucket, 0..burst (default 0); or nodelay: true
//	        # limit: 100, window: 60s   # the window algorithms
//	        overrides:                  # header:NAME and ip tiers: other parameters of
//	                                    # the tier's algorithm for some keys; the most
//	                                    # specific match wins (an exact key, else the
//	                                    # longest prefix); the admin API adds runtime ones
//	                                    # (docs/design.md#per-key-overrides)
//	          - {key: tenant-a, rate: 100/s, burst: 200}
//	          - {key: "tenant-*", rate: 50/s, burst: 50}   # a prefix; "*" alone: every key
//	    backlog:
//	      capacity: 10000               # default 10000
//	      per_key_capacity: 500         # default 0: no per-key bound
//	      leak_rate: 50/s               # required; or {max: 50/s, adaptive: true}:
//	                                    # at most max, cut when the handler's
//	                                    # downstream pushes back (429, 503, busy)
//	      max_age: 1h                   # default 0: no limit
//	      max_delay: 24h                # how far ahead Spillway-Not-Before or
//	                                    # Spillway-Delay may schedule a job
//	                                    # (default 24h; 0: no scheduled jobs)
//	      duplicate_window: 2m          # default 2m
//	      fairness:                     # how the leak is shared (default: every key weight 1,
//	                                    # the priority classes strictly in order)
//	        weights: {"tenant-a": 2, "tenant-*": 3}   # 1 to 1000 (default 1); KEY* a prefix,
//	                                    # "*" every key; an exact key wins over a prefix, a longer
//	                                    # prefix over a shorter (quote keys with *: YAML aliases)
//	        min_share: 10%              # each lower class's share while it has due jobs,
//	                                    # 0 to 0.5 or 0% to 50% (default 0: strict priority)
//	    ready:
//	      capacity: 10000               # admitted jobs READY holds (default 10000);
//	                                    # when full, admitted jobs are queued in the backlog
//	    retry: {max_attempts: 5, initial: 1s, max: 5m, jitter: 0.2}   # the defaults; jitter 0: none
//	    handler:                        # one of; leave it out for an admit-only queue
//	      http: {url: "http://127.0.0.1:9000/send", timeout: 10s, headers: {Authorization: "Bearer x"}}
//	      # nats: {subject: jobs.email, timeout: 10s}
//	      # log: true
//
// An ip tier keys on the HTTP client's address: the NATS door has none, and
// answers a submission to such a queue 400 bad-key (the admitter warns at
// start and at each reload, naming the queue and the tier).
//
// A submission's Spillway-Priority header (high, normal or low) and its
// key's weight under backlog.fairness.weights travel with the job: the
// admitter stamps both on it, so a reload's weights apply to the jobs
// submitted after it, and workers never match keys against the rules.
//
// A submission's Spillway-Not-Before or Spillway-Delay queues its job in
// the backlog until then, at most backlog.max_delay ahead (and max_age,
// when set); Spillway-Max-Wait refuses a job that would start later (429
// wait-too-long, nothing taken) and is a queued job's expiry
// (docs/design.md#scheduled-jobs, docs/design.md#max-wait).
//
// A queue without a handler is admit-only: the admitter takes its jobs, and
// a worker refuses to run it, since nothing could finish its jobs.
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
// # Reloading
//
// A Watcher holds the running configuration. main calls Reload on SIGHUP
// (signals belong to main) and runs Run to pick up changes of the file,
// found by polling its modification time, size and contents' hash, which
// also sees an editor's rename over the file. An invalid reload keeps the
// running configuration, is logged, and is reported to the OnResult hook.
// The admitter applies a reload's queues, limits, fairness weights (to
// the jobs submitted after it) and redis.failure_mode (its decisions and
// /readyz follow the new mode); redis.url and redis.timeout take effect
// at its next start.
//
// # Dev mode
//
// Dev is the built-in configuration of `admitter --dev` without --config:
// one queue "demo" (leaky_bucket 5/s, burst 20, delay 5 per X-Client-Id,
// on_missing: shared,
// backlog 100 drained at 5/s, a handler that logs). LoadDev chooses between
// it and a file.
package config
