package config

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// Defaults of the fields that have one.
const (
	DefaultNATSURL      = "nats://127.0.0.1:4222"
	DefaultNATSListen   = "127.0.0.1:4222"
	DefaultReplyPrefix  = "_INBOX."
	DefaultHTTPListen   = ":8080"
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxInflightBytes bounds the request bodies the HTTP door
	// reads at once: eight batches of the default batch limit (16 ×
	// DefaultMaxBodyBytes), or 128 single submissions of the largest size.
	DefaultMaxInflightBytes = 128 << 20
	// DefaultWriteTimeout bounds the writing of one HTTP answer.
	DefaultWriteTimeout = 30 * time.Second
	DefaultStoreTimeout = 50 * time.Millisecond
	DefaultStatusTTL    = 24 * time.Hour
	DefaultGracePeriod  = 30 * time.Second
	DefaultAckWait      = 30 * time.Second
)

// Config is one whole, validated configuration.
type Config struct {
	// Source is the file it was loaded from ("" for the built-in dev config).
	Source string
	NATS   NATS
	Redis  Redis
	HTTP   HTTP
	Worker Worker
	// Status configures the job-status records (JetStream KV).
	Status Status
	// Queues in file order; names are unique.
	Queues []Queue
}

// Queue returns the queue of that name, or nil.
func (c *Config) Queue(name string) *Queue {
	for i := range c.Queues {
		if c.Queues[i].Name == name {
			return &c.Queues[i]
		}
	}
	return nil
}

// NATS is how to reach NATS (nats:): the connection settings, whose
// rules are conn's, and the dev server's and the streams' own.
type NATS struct {
	// URL (default nats://127.0.0.1:4222; user info authenticates),
	// CredsFile, NkeyFile and InboxPrefix (default none of them).
	conn.NATSConfig
	// Listen is where `admitter --dev` runs its embedded server
	// (default 127.0.0.1:4222).
	Listen string
	// StoreDir is the embedded server's JetStream directory in dev mode
	// (default: a temporary directory removed at exit).
	StoreDir string
	// Replicas of every stream, 1 to 5 (default 1). Load copies it into
	// each queue's Backlog.Replicas.
	Replicas int
	// ReplyPrefix is where the NATS door answers (default "_INBOX."): a
	// request whose reply subject does not start with it is dropped, so
	// a producer cannot aim an answer at a subject it could not publish
	// to itself (a KV key, a JetStream API subject). Not empty, no
	// wildcards, ends with ".".
	ReplyPrefix string
}

// FailureMode is what an admitter does when its bucket store fails.
type FailureMode string

// Failure modes (redis.failure_mode; docs/design.md#failure-modes).
const (
	// FailOpen admits every job while the store is unreachable.
	FailOpen FailureMode = "open"
	// FailClosed answers 503 with Retry-After while the store is unreachable.
	FailClosed FailureMode = "closed"
	// FailLocal decides in a per-admitter memory store at the same limits.
	FailLocal FailureMode = "local"
)

// Redis is the shared bucket store (redis:): how to reach it, whose rules
// are conn's, and what an admitter does when it fails.
type Redis struct {
	conn.RedisConfig             // Timeout: default 50ms
	FailureMode      FailureMode // default open
}

// HTTP is the admitter's HTTP front door (http:).
type HTTP struct {
	Listen       string // default :8080
	MaxBodyBytes int64  // default 1 MiB
	// MaxInflightBytes bounds the bytes of the submissions' bodies the
	// door holds at once, single and batch: each request reserves its
	// Content-Length (its body limit when it sends none) before it is
	// read (default DefaultMaxInflightBytes, 128 MiB).
	MaxInflightBytes int64
	// WriteTimeout bounds the writing of one answer, from its first byte:
	// a client that stops reading loses its connection after it (default
	// DefaultWriteTimeout, 30s).
	WriteTimeout time.Duration
	APIKeysFile  string // one key per line; "" = no authentication
	// AdminKeysFile holds the keys allowed on the admin endpoints (pause
	// and resume), in the API keys file's format; "" = nobody is.
	AdminKeysFile  string
	TrustedProxies []netip.Prefix
	// ShowRawKeys lists raw client keys, beside their hashes, in
	// GET /v1/queues/{queue}/keys (default false: hashes only). It is
	// refused for a queue with a tier keyed on a credential header
	// (CredentialHeader).
	ShowRawKeys bool
}

// Worker holds worker-process settings (worker:).
type Worker struct {
	Concurrency int           // per queue (default worker.DefaultConcurrency)
	GracePeriod time.Duration // default 30s
	AckWait     time.Duration // default 30s
}

// Status configures job-status records (status:).
type Status struct {
	TTL time.Duration // how long a job's record is kept (default 24h)
	// RecordRunning makes workers write a running record when a job's try
	// starts: a third write per job. Off (the default), a job's record
	// says admitted until its outcome, except a backlog job's, whose start
	// is written for a cancel to race (docs/design.md#job-status-writes).
	RecordRunning bool
}

// Queue is one queue (an item of queues:).
type Queue struct {
	Name   string
	Limits []Limit
	// Backlog has every field filled: Name is the queue's name, LeakRate
	// is set (required), Replicas is NATS.Replicas, and Capacity,
	// DuplicateWindow and ReadyCapacity (ready.capacity) hold their
	// defaults when the file omits them.
	Backlog queue.Config
	// Retry has every field filled with its default when the file omits
	// it. A file's jitter of 0 turns jitter off and is stored as -1 (a
	// zero retry.Policy.Jitter would mean the default, 0.2).
	Retry retry.Policy
	// Handler runs the queue's jobs; its timeout is filled with the
	// default when the file omits it. Its zero value (no handler: the file
	// has no handler section) makes an admit-only queue: the admitter
	// accepts jobs for it, and the worker refuses to run it.
	Handler handler.Config
	// Concurrency are the queue's per-key concurrency bounds
	// (concurrency:); nil: none.
	Concurrency []Concurrency
}

// KeyKind is what identifies a client for one limit tier.
type KeyKind uint8

// Key kinds.
const (
	KeyGlobal KeyKind = iota // global: one bucket for everybody
	KeyHeader                // header:NAME
	KeyIP                    // ip: the HTTP peer (X-Forwarded-For from trusted proxies)
)

// Key is a limit tier's key source, as written: "global", "ip" or "header:NAME".
type Key struct {
	Kind   KeyKind
	Header string // canonical MIME header name for KeyHeader
}

// OnMissing is what a header:NAME tier does with a request that does not
// carry the header (limits[].on_missing).
type OnMissing string

// What a header:NAME tier does without its header.
const (
	// MissingReject answers 400 bad-key naming the header (the default).
	MissingReject OnMissing = "reject"
	// MissingShared keys every request without the header on the empty
	// value: they all share one bucket.
	MissingShared OnMissing = "shared"
)

// Limit is one limit tier.
type Limit struct {
	// Name names the tier in the RateLimit-Policy and RateLimit headers,
	// in messages and in metrics: the file's name, or "tier<i>" (i its
	// index in the queue's limits) when the file gives none. Names are
	// unique in a queue.
	Name string
	Key  Key
	// OnMissing is what a header:NAME tier does without its header
	// (default MissingReject); MissingReject for other keys.
	OnMissing OnMissing
	// Mode is whether the tier enforces its verdicts (ModeEnforce, the
	// default) or only decides and counts them (ModeShadow).
	Mode  Mode
	Limit bucket.Limit
	// Overrides give some keys other parameters of the tier's algorithm
	// (docs/design.md#per-key-overrides): the file's, and in the
	// configuration an admitter runs (admit.Admitter.Config) the runtime
	// ones too. nil: none.
	Overrides *overrides.Table
}

// Mode is whether a limit tier enforces its verdicts (limits[].mode).
type Mode string

// Modes of a limit tier (docs/design.md#shadow-tiers).
const (
	// ModeEnforce: the tier's verdict counts in the job's (the default;
	// the zero value means it too).
	ModeEnforce Mode = "enforce"
	// ModeShadow: the tier is decided for every job the enforcing tiers
	// take, at its own key and state, and its verdict is answered in
	// Spillway-Shadow and counted, but never refuses, queues or delays
	// the job.
	ModeShadow Mode = "shadow"
)

// Shadow reports whether the tier is in shadow mode.
func (l Limit) Shadow() bool { return l.Mode == ModeShadow }

// DefaultTierName is the name of tier i of a queue when the file gives it
// none.
func DefaultTierName(i int) string { return "tier" + strconv.Itoa(i) }
