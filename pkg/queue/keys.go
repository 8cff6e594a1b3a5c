package queue

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeyHash is a key's stable public name where the key itself should not
// show (an API listing, the drain's release counts): the first 64 bits of
// its SHA-256 in lower-case hex, 16 characters. They are the bits its
// KeyToken begins with.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// Bounds of BacklogKeys.
const (
	// DefaultTopKeys and MaxTopKeys bound how many keys BacklogKeys lists.
	DefaultTopKeys = 20
	MaxTopKeys     = 1000
	// KeySample is how many of a key's first jobs BacklogKeys reads for
	// its priority mix, at most; keySampleBudget bounds the jobs read for
	// all keys together, so a long listing samples fewer per key.
	KeySample       = 64
	keySampleBudget = 4096
)

// KeyBacklog is one key's part of a queue's backlog.
type KeyBacklog struct {
	// Key is the client key, from its first job's Spillway-Key header;
	// Hash is KeyHash(Key).
	Key, Hash string
	// Depth is how many of the key's jobs the backlog holds.
	Depth uint64
	// OldestAge is how long the key's first job has been in the backlog.
	OldestAge time.Duration
	// Weight is the key's fairness weight, from its first job's
	// Spillway-Weight header (the admitter stamped it at submission).
	Weight int
	// Priorities counts the classes among the key's first Sampled jobs
	// (at most KeySample; fewer in a long listing): a sample, not the
	// whole backlog. Indexed by Priority: High, Normal, Low.
	Priorities map[Priority]int
	Sampled    int
}

// BacklogKeys lists the top keys of a queue's backlog, the deepest first
// (ties by key token, so the order is stable): top ≤ 0 means
// DefaultTopKeys, and more than MaxTopKeys is refused. total is how many
// keys the backlog holds.
//
// It costs one stream info listing every key's subject (JetStream counts
// per subject), then for each listed key one read of its first job and
// a sample of the following ones, at most keySampleBudget reads in all.
// Jobs leave while it reads: a key whose jobs are all gone by then is
// left out.
func BacklogKeys(ctx context.Context, js jetstream.JetStream, queue string, top int) (keys []KeyBacklog, total int, err error) {
	if top <= 0 {
		top = DefaultTopKeys
	}
	if top > MaxTopKeys {
		return nil, 0, fmt.Errorf("queue: listing the keys of %s: top %d: want at most %d", queue, top, MaxTopKeys)
	}
	name := StreamName(queue, Backlog)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, 0, fmt.Errorf("queue: listing the keys of %s: stream %s: %w", queue, name, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subjectFilter(queue, Backlog)))
	if err != nil {
		return nil, 0, fmt.Errorf("queue: listing the keys of %s: %w", queue, err)
	}
	type subject struct {
		name string
		n    uint64
	}
	subjects := make([]subject, 0, len(info.State.Subjects))
	for name, n := range info.State.Subjects {
		if n > 0 {
			subjects = append(subjects, subject{name, n})
		}
	}
	total = len(subjects)
	slices.SortFunc(subjects, func(a, b subject) int {
		if a.n != b.n {
			return cmp.Compare(b.n, a.n)
		}
		return cmp.Compare(a.name, b.name)
	})
	subjects = subjects[:min(top, len(subjects))]
	sample := min(KeySample, max(1, keySampleBudget/max(1, len(subjects))))
	now := time.Now()
	keys = make([]KeyBacklog, 0, len(subjects))
	for _, sub := range subjects {
		k, ok, err := readKey(ctx, s, sub.name, info.State.FirstSeq, min(uint64(sample), sub.n), now)
		if err != nil {
			return nil, 0, fmt.Errorf("queue: listing the keys of %s: %w", queue, err)
		}
		if ok {
			k.Depth = sub.n
			keys = append(keys, k)
		}
	}
	return keys, total, nil
}

// readKey reads the first sample jobs of one key's subject, from the
// stream's first sequence on: its key, age and weight from the first, the
// classes from all. ok is false when the subject has no job left.
func readKey(ctx context.Context, s jetstream.Stream, subject string, first, sample uint64, now time.Time) (k KeyBacklog, ok bool, err error) {
	k.Priorities = map[Priority]int{High: 0, Normal: 0, Low: 0}
	seq := max(first, 1)
	for i := uint64(0); i < sample; i++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // the rest has left meanwhile
		}
		if err != nil {
			return k, false, fmt.Errorf("reading %s: %w", subject, err)
		}
		if i == 0 {
			k.Key = m.Header.Get(HeaderKey)
			k.Hash = KeyHash(k.Key)
			k.OldestAge = max(0, now.Sub(m.Time))
			k.Weight = 1
			if w, err := strconv.Atoi(m.Header.Get(HeaderWeight)); err == nil && w >= 1 && w <= MaxWeight {
				k.Weight = w
			}
			ok = true
		}
		p, _ := ParsePriority(m.Header.Get(HeaderPriority)) // not a class: counted normal, as the drain reads it
		k.Priorities[p]++
		k.Sampled++
		seq = m.Sequence + 1
	}
	return k, ok, nil
}

// KeyReleasesKey is the key, in PacerBucket, of the document the drain's
// leader publishes for a queue: how many jobs of each key it released
// over a recent window (KeyReleases).
func KeyReleasesKey(queue string) string { return queue + ".keys" }

// KeyReleases is the drain leader's count of releases per key over the
// Window ending At, keyed by KeyHash.
type KeyReleases struct {
	At       time.Time        `json:"at"`
	WindowS  int64            `json:"window_s"`
	Releases map[string]int64 `json:"releases"`
}

// Share is the key's share of the releases, 0 to 1 (0 when nothing was
// released).
func (r *KeyReleases) Share(hash string) float64 {
	var total int64
	for _, n := range r.Releases {
		total += max(0, n)
	}
	if total == 0 {
		return 0
	}
	return float64(max(0, r.Releases[hash])) / float64(total)
}

// ReadKeyReleases reads a queue's KeyReleases from PacerBucket: nil,
// without error, when the bucket or the document does not exist (no
// leader has published one).
func ReadKeyReleases(ctx context.Context, js jetstream.JetStream, queue string) (*KeyReleases, error) {
	kv, err := js.KeyValue(ctx, PacerBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: release counts of %s: %w", queue, err)
	}
	e, err := kv.Get(ctx, KeyReleasesKey(queue))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: release counts of %s: %w", queue, err)
	}
	var r KeyReleases
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("queue: release counts of %s: %s in %s: %w", queue, KeyReleasesKey(queue), PacerBucket, err)
	}
	return &r, nil
}
