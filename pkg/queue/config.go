package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Defaults of a Config's zero fields.
const (
	DefaultCapacity        = 10_000
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultReadyCapacity bounds READY as the backlog's default bounds
	// the backlog. A healthy READY holds a few jobs per running handler,
	// so the bound is met only when workers are down or far behind; then
	// it caps what JetStream stores (with the backlog, at most twice the
	// default backlog) instead of letting admitted jobs pile up without
	// limit.
	DefaultReadyCapacity = 10_000
	// DefaultMaxDelay bounds how far ahead a submission may schedule its
	// job (Spillway-Not-Before, Spillway-Delay).
	DefaultMaxDelay = 24 * time.Hour
)

// Config describes one queue's streams. The zero value of every field but
// Name takes its documented default.
type Config struct {
	// Name is the queue's name (spillway.ValidateQueueName).
	Name string
	// Capacity bounds the backlog: jobs waiting in total (default 10,000).
	Capacity int64
	// PerKeyCapacity bounds one key's jobs of one priority class in the
	// backlog (default 0: only Capacity bounds a key). Most keys send one
	// class; a key that sends high, normal and low jobs may hold this many
	// of each.
	PerKeyCapacity int64
	// ReadyCapacity bounds READY: admitted jobs waiting, running or
	// waiting for a retry (default 10,000). A publish to a full READY is
	// refused with ErrReadyFull; the admitter then queues the job in the
	// backlog. A full READY holds back no backlog job: those run from the
	// backlog at their booked start.
	ReadyCapacity int64
	// Replicas of every stream (default 1; 3 on a 3-node cluster).
	Replicas int
	// Memory keeps the streams in memory instead of files (default false:
	// file storage, which survives a server restart). For tests only.
	Memory bool
	// DuplicateWindow is how long a job id is remembered, so that a
	// retried publish is stored once (default 2m). It also bounds how late
	// a worker that crashed while moving a due job from the backlog to READY
	// can be caught repeating the move.
	DuplicateWindow time.Duration
	// LeakRate is how many backlog jobs start per unit of time in total,
	// across every worker process (no default: a worker refuses a queue
	// without one, since its backlog would never drain).
	LeakRate bucket.Rate
	// Adaptive makes LeakRate the most the leak runs at: the rate is cut
	// when a handler's downstream pushes back (429, 503) and climbs back
	// while it does not (default false: the leak runs at LeakRate, and
	// pushback only pauses it).
	Adaptive bool
	// Fairness shares the leak among keys and priority classes.
	Fairness Fairness
	// MaxAge is how long a job may wait in the backlog; an older job is
	// moved to the dead-letter stream instead of starting (default 0: no
	// limit). It is deliberately not JetStream's MaxAge, which would delete
	// the job without a trace.
	MaxAge time.Duration
	// MaxDelay is how far ahead of its submission a job may be scheduled
	// (Spillway-Not-Before, Spillway-Delay); the admitter refuses a later
	// time (default 24h; a configuration file's 0 refuses every scheduled
	// job). The tiers' own not-before is not bounded by it.
	MaxDelay time.Duration
	// Pushback is what a handler's pushback (429, 503, busy) pauses
	// (docs/design.md#pushback): the queue's whole leak (PushbackQueue,
	// the default; "" means it), or only the pushed-back job's key
	// (PushbackKey), whose share the other keys take meanwhile.
	Pushback PushbackScope
}

// PushbackScope is what a handler's pushback pauses: Config.Pushback.
type PushbackScope string

// Pushback scopes.
const (
	PushbackQueue PushbackScope = "queue"
	PushbackKey   PushbackScope = "key"
)

// WithDefaults is c with each zero field set to its documented default.
func (c Config) WithDefaults() Config {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.ReadyCapacity == 0 {
		c.ReadyCapacity = DefaultReadyCapacity
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	return c
}

// Validate reports every field that cannot be used, naming it: the name
// (spillway.ValidateQueueName), then the problems of ValidateGiven once
// the zero fields hold their defaults.
func (c Config) Validate() error {
	if err := spillway.ValidateQueueName(c.Name); err != nil {
		return fmt.Errorf("%w: name: %w", ErrInvalidConfig, err)
	}
	return c.WithDefaults().ValidateGiven()
}

// ValidateReplicas checks a stream's replica count: 1 to 5.
func ValidateReplicas(n int) error {
	if n < 1 || n > 5 {
		return &FieldError{Field: "replicas", Value: fmt.Sprint(n), Want: "an integer from 1 to 5"}
	}
	return nil
}

// ValidateGiven is Validate for a Config whose every field is given, such
// as one a configuration file's loader filled with the defaults itself: a
// zero Capacity, ReadyCapacity, Replicas or DuplicateWindow is refused,
// not read as the default. It does not check Name. It reports every
// problem, each a *FieldError, in the order of a configuration file's
// fields (errors.Join).
func (c Config) ValidateGiven() error {
	var errs []error
	bad := func(field string, value any, want string) {
		errs = append(errs, &FieldError{Queue: c.Name, Field: field, Value: fmt.Sprint(value), Want: want})
	}
	if c.Capacity < 1 {
		bad("capacity", c.Capacity, "an integer ≥ 1")
	}
	if c.PerKeyCapacity < 0 {
		bad("per_key_capacity", c.PerKeyCapacity, "an integer ≥ 0")
	} else if c.Capacity >= 1 && c.PerKeyCapacity > c.Capacity {
		errs = append(errs, &FieldError{Queue: c.Name, Field: "per_key_capacity", Value: fmt.Sprint(c.PerKeyCapacity),
			Want: "at most capacity", Other: "capacity", OtherValue: fmt.Sprint(c.Capacity)})
	}
	if c.LeakRate.Count < 0 || c.LeakRate.Per < 0 || (c.LeakRate.Count > 0) != (c.LeakRate.Per > 0) {
		bad("leak_rate", c.LeakRate, "COUNT/UNIT such as 50/s")
	}
	if c.MaxAge < 0 {
		bad("max_age", c.MaxAge, "a duration ≥ 0")
	}
	if c.MaxDelay < 0 {
		bad("max_delay", c.MaxDelay, "a duration ≥ 0")
	}
	if c.DuplicateWindow <= 0 {
		bad("duplicate_window", c.DuplicateWindow, "a positive duration")
	}
	for _, r := range c.Fairness.Weights {
		if r.Weight < 1 || r.Weight > MaxWeight {
			bad(fmt.Sprintf("fairness.weights[%q]", r.String()), r.Weight, fmt.Sprintf("an integer from 1 to %d", MaxWeight))
		}
	}
	if s := c.Fairness.MinShare; !(s >= 0 && s <= MaxMinShare) { // NaN too
		bad("fairness.min_share", s, fmt.Sprintf("a share from 0 to %v (0%% to %v%%)", MaxMinShare, MaxMinShare*100))
	}
	if c.ReadyCapacity < 1 {
		bad("ready_capacity", c.ReadyCapacity, "an integer ≥ 1")
	}
	if c.Pushback != "" && c.Pushback != PushbackQueue && c.Pushback != PushbackKey {
		bad("pushback", c.Pushback, "queue or key")
	}
	if err := ValidateReplicas(c.Replicas); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Queue = c.Name
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Destination is a stream of a queue that jobs are published to.
type Destination uint8

const (
	// Ready holds admitted jobs, run as fast as workers allow.
	Ready Destination = iota
	// Backlog is the bounded FIFO of queued jobs, drained at the leak rate.
	Backlog
	// Dead holds jobs that failed for good.
	Dead
)

var destinationNames = [...]string{"ready", "backlog", "dead"}

func (d Destination) String() string {
	if int(d) < len(destinationNames) {
		return destinationNames[d]
	}
	return fmt.Sprintf("Destination(%d)", d)
}

// StreamName is the JetStream stream of a queue's destination:
// SPILLWAY_<queue>_READY, _BACKLOG or _DEAD.
func StreamName(queue string, d Destination) string {
	switch d {
	case Backlog:
		return "SPILLWAY_" + queue + "_BACKLOG"
	case Dead:
		return "SPILLWAY_" + queue + "_DEAD"
	}
	return "SPILLWAY_" + queue + "_READY"
}

// GrantsStreamName is the stream of a queue's grants: SPILLWAY_<queue>_GRANTS.
func GrantsStreamName(queue string) string { return "SPILLWAY_" + queue + "_GRANTS" }

// grantsStreamConfig keeps a queue's grants until a worker settles them.
func (c Config) grantsStreamConfig() jetstream.StreamConfig {
	c = c.WithDefaults()
	return c.stream(GrantsStreamName(c.Name), "backlog starts granted by the drain's leader", GrantSubject(c.Name))
}

// Subject is where a job of key lands in the backlog (a job of the normal
// class) or DEAD: spillway.<destination>.<queue>.<key token>. One subject
// per key (and class) is what makes the per-key capacity a JetStream limit.
// READY's subjects name the job, not its key (ReadySubject): d must not be
// Ready.
func Subject(queue string, d Destination, key string) string {
	return subjectOf(queue, d, KeyToken(key))
}

// ClassSubject is where a job of key and class p lands: in the backlog, a
// high or low job has a subject of its own,
// spillway.backlog.<queue>.<class>.<key token>; in DEAD, and for a normal
// job, it is Subject. As Subject's, d must not be Ready.
func ClassSubject(queue string, d Destination, key string, p spillway.Priority) string {
	return classSubject(queue, d, p, KeyToken(key))
}

// StreamConfig is the JetStream configuration of a queue's destination.
//
// Ready and backlog streams use work-queue retention: a READY job leaves
// when a worker acks it; the backlog has no consumer, and a job leaves it
// when the worker that ran it deletes it. Their bounds are JetStream's own — MaxMsgs with Discard
// New, and for the backlog MaxMsgsPerSubject with Discard New per subject —
// so a full stream refuses the publish itself, with no check-then-publish
// race between admitters (docs/jetstream-backlog.md: observed on nats-server
// 2.9 and 2.15). Lowering a bound under what a stream holds drops nothing:
// with Discard New the server only refuses new jobs. Dead letters are kept
// until purged (limits retention).
func (c Config) StreamConfig(d Destination) jetstream.StreamConfig {
	c = c.WithDefaults()
	sc := c.stream(StreamName(c.Name, d), fmt.Sprintf("%s jobs", d), SubjectFilter(c.Name, d))
	switch d {
	case Ready:
		sc.MaxMsgs = c.ReadyCapacity
		sc.Discard = jetstream.DiscardNew
		// A job is read by its id (FindReady) from any replica.
		sc.AllowDirect = true
	case Backlog:
		sc.MaxMsgs = c.Capacity
		sc.Discard = jetstream.DiscardNew
		// A job is read by its sequence, at its start and by the drain's
		// leader, from any replica (direct.go says who confirms what).
		sc.AllowDirect = true
		if c.PerKeyCapacity > 0 {
			sc.MaxMsgsPerSubject = c.PerKeyCapacity
			sc.DiscardNewPerSubject = true
		}
	case Dead:
		sc.Retention = jetstream.LimitsPolicy
	}
	return sc
}

// stream is the part every stream of the queue shares: work-queue
// retention, the queue's storage, replicas and duplicate window, no bound.
func (c Config) stream(name, holds, subject string) jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:        name,
		Description: fmt.Sprintf("Spillway queue %s: %s", c.Name, holds),
		Subjects:    []string{subject},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		MaxMsgs:     -1,
		MaxBytes:    -1,
	}
	if c.Memory {
		sc.Storage = jetstream.MemoryStorage
	}
	return sc
}

// EnsureStreams creates a queue's streams (READY, BACKLOG, DEAD and the
// drain's GRANTS), or updates them to cfg:
// it is idempotent, and safe for several processes to call at once. A
// stream that already has cfg's settings is left alone rather than updated
// to the same thing: every worker and admitter calls this at start, and an
// update is not free for the server (nor, in nats-server 2.15, race-free
// against consumers being created at the same moment).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, d := range []Destination{Ready, Backlog, Dead} {
		sc := cfg.StreamConfig(d)
		if err := ensureStream(ctx, js, sc); err != nil {
			return fmt.Errorf("queue: stream %s: %w", sc.Name, err)
		}
	}
	sc := cfg.grantsStreamConfig()
	if err := ensureStream(ctx, js, sc); err != nil {
		return fmt.Errorf("queue: stream %s: %w", sc.Name, err)
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, sc)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err // created, or failed
		}
		// Another process created it meanwhile, maybe from another config.
		s, err = js.Stream(ctx, sc.Name)
	}
	if err != nil {
		return err
	}
	if sameStream(s.CachedInfo().Config, sc) {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// unlimited maps JetStream's "no limit" spellings (0 and -1; the server
// reports -1) to one.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// sameStream reports whether a stream's config has every setting
// StreamConfig makes (the server fills in others).
func sameStream(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description &&
		slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention &&
		have.Storage == want.Storage &&
		max(have.Replicas, 1) == max(want.Replicas, 1) &&
		have.Duplicates == want.Duplicates &&
		unlimited(have.MaxMsgs) == unlimited(want.MaxMsgs) &&
		unlimited(have.MaxBytes) == unlimited(want.MaxBytes) &&
		have.MaxAge == want.MaxAge &&
		have.Discard == want.Discard &&
		unlimited(have.MaxMsgsPerSubject) == unlimited(want.MaxMsgsPerSubject) &&
		have.DiscardNewPerSubject == want.DiscardNewPerSubject &&
		have.AllowDirect == want.AllowDirect
}

// MaxMinShare bounds Fairness.MinShare: a lower class never takes more
// than half of the starts from a higher one.
const MaxMinShare = 0.5

// Fairness shares a queue's leak among its keys and priority classes
// (docs/design.md#fair-drain). The zero value gives every key weight 1 and
// the classes strict priority.
type Fairness struct {
	// Weights give keys other weights than 1, matched by the admitter
	// (WeightOf) and carried with each job. The most specific rule that
	// matches a key wins, whatever the order: an exact key's, else the
	// longest prefix's.
	Weights []WeightRule
	// MinShare is the share of the starts each lower class keeps while it
	// has due jobs, however many jobs of higher classes are due (0 to 0.5;
	// 0: strict priority).
	MinShare float64
}

// KeyPattern is a set of client keys: Key exactly, or, when Prefix is
// set, every key that starts with Key ("" with Prefix: every key). The
// zero value is the empty key exactly. Fairness weights and the
// admitter's per-key limit overrides both pick their keys with it.
type KeyPattern struct {
	// Key is the key, or with Prefix the beginning of the keys.
	Key    string
	Prefix bool
}

// String is the pattern as a configuration file writes it: the key, or
// the prefix followed by * ("*" alone for every key).
func (p KeyPattern) String() string {
	if p.Prefix {
		return p.Key + "*"
	}
	return p.Key
}

// Match reports whether key is one of the pattern's keys.
func (p KeyPattern) Match(key string) bool {
	if p.Prefix {
		return strings.HasPrefix(key, p.Key)
	}
	return key == p.Key
}

// WeightRule gives the keys it matches a weight.
type WeightRule struct {
	KeyPattern
	// Weight is the keys' share of the leak relative to weight-1 keys
	// (1 to MaxWeight).
	Weight int
}

// WeightOf is key's weight: the weight of the most specific rule that
// matches it — an exact rule's, else the longest prefix's, the first of
// equals — or 1 when none does. Rules in that order (exact ones first,
// then prefixes from the longest, as the configuration loader sorts
// them) make it the first rule that matches.
func (f Fairness) WeightOf(key string) int {
	w, longest := 1, -1
	for _, r := range f.Weights {
		switch {
		case !r.Match(key):
		case !r.Prefix:
			return r.Weight
		case len(r.Key) > longest:
			w, longest = r.Weight, len(r.Key)
		}
	}
	return w
}
