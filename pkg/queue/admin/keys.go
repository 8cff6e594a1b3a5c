package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Bounds of BacklogKeys: DefaultTopKeys and MaxTopKeys bound how many keys
// it lists.
const (
	DefaultTopKeys = 20
	MaxTopKeys     = 1000
)

// KeyBacklog is one key's part of a queue's backlog.
type KeyBacklog struct {
	// Key is the client key, from its first job's Spillway-Key header;
	// Hash is queue.KeyHash(Key).
	Key, Hash string
	// Depth is how many of the key's jobs the backlog holds.
	Depth uint64
	// OldestAge is how long the key's oldest job has been in the backlog.
	OldestAge time.Duration
	// Weight is the key's fairness weight, from its oldest job's
	// Spillway-Weight header (the admitter stamped it at submission).
	Weight int
	// Priorities counts the key's jobs of each class: each class has a
	// backlog subject of its own, so the counts are JetStream's, exact.
	Priorities map[spillway.Priority]int
}

// BacklogKeys lists the top keys of a queue's backlog, the deepest first
// (ties by key token, so the order is stable): top ≤ 0 means
// DefaultTopKeys, and more than MaxTopKeys is refused. total is how many
// keys the backlog holds.
//
// It costs one stream info listing every subject with its count (a key
// has one per priority class it uses), then for each listed key one read
// of the first job of each of its classes. Jobs leave while it reads: a
// key whose jobs are all gone by then is left out.
func BacklogKeys(ctx context.Context, js jetstream.JetStream, q string, top int) (keys []KeyBacklog, total int, err error) {
	if top <= 0 {
		top = DefaultTopKeys
	}
	if top > MaxTopKeys {
		return nil, 0, fmt.Errorf("admin: listing the keys of %s: top %d: want at most %d", q, top, MaxTopKeys)
	}
	name := queue.StreamName(q, queue.Backlog)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, 0, fmt.Errorf("admin: listing the keys of %s: stream %s: %w", q, name, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(queue.SubjectFilter(q, queue.Backlog)))
	if err != nil {
		return nil, 0, fmt.Errorf("admin: listing the keys of %s: %w", q, err)
	}
	type key struct {
		token    string
		n        uint64
		subjects []string
		classes  map[spillway.Priority]int
	}
	byToken := make(map[string]*key)
	for subject, n := range info.State.Subjects {
		if n == 0 {
			continue
		}
		tok := queue.SubjectToken(subject)
		k := byToken[tok]
		if k == nil {
			k = &key{token: tok, classes: map[spillway.Priority]int{spillway.High: 0, spillway.Normal: 0, spillway.Low: 0}}
			byToken[tok] = k
		}
		k.n += n
		k.subjects = append(k.subjects, subject)
		k.classes[queue.SubjectClass(subject)] += int(n)
	}
	sorted := make([]*key, 0, len(byToken))
	for _, k := range byToken {
		sorted = append(sorted, k)
	}
	total = len(sorted)
	slices.SortFunc(sorted, func(a, b *key) int {
		if a.n != b.n {
			return cmp.Compare(b.n, a.n)
		}
		return cmp.Compare(a.token, b.token)
	})
	now := time.Now()
	keys = make([]KeyBacklog, 0, min(top, len(sorted)))
	for _, k := range sorted[:min(top, len(sorted))] {
		kb, ok, err := readKey(ctx, s, k.subjects, now)
		if err != nil {
			return nil, 0, fmt.Errorf("admin: listing the keys of %s: %w", q, err)
		}
		if ok {
			kb.Depth, kb.Priorities = k.n, k.classes
			keys = append(keys, kb)
		}
	}
	return keys, total, nil
}

// readKey reads the first job of each of a key's subjects: its key, and
// the age and weight of the oldest. ok is false when none is left.
func readKey(ctx context.Context, s jetstream.Stream, subjects []string, now time.Time) (k KeyBacklog, ok bool, err error) {
	var oldest *jetstream.RawStreamMsg
	for _, subject := range subjects {
		m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // left meanwhile
		}
		if err != nil {
			return k, false, fmt.Errorf("reading %s: %w", subject, err)
		}
		if oldest == nil || m.Sequence < oldest.Sequence {
			oldest = m
		}
	}
	if oldest == nil {
		return k, false, nil
	}
	k.Key = oldest.Header.Get(spillway.HeaderKey)
	k.Hash = queue.KeyHash(k.Key)
	k.OldestAge = max(0, now.Sub(oldest.Time))
	k.Weight = 1
	if w, err := strconv.Atoi(oldest.Header.Get(queue.HeaderWeight)); err == nil && w >= 1 && w <= queue.MaxWeight {
		k.Weight = w
	}
	return k, true, nil
}
