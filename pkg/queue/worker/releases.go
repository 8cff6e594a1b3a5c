package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// KeyReleasesKey is the key, in pace.PacerBucket, of the document the drain's
// leader publishes for a queue: how many jobs of each key it released
// over a recent window (KeyReleases).
func KeyReleasesKey(q string) string { return q + ".keys" }

// KeyReleases is the drain leader's count of releases per key over the
// Window ending At, keyed by queue.KeyHash.
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

// ReadKeyReleases reads a queue's KeyReleases from pace.PacerBucket: nil,
// without error, when the bucket or the document does not exist (no
// leader has published one).
func ReadKeyReleases(ctx context.Context, js jetstream.JetStream, q string) (*KeyReleases, error) {
	kv, err := js.KeyValue(ctx, pace.PacerBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker: release counts of %s: %w", q, err)
	}
	e, err := kv.Get(ctx, KeyReleasesKey(q))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker: release counts of %s: %w", q, err)
	}
	var r KeyReleases
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("worker: release counts of %s: %s in %s: %w", q, KeyReleasesKey(q), pace.PacerBucket, err)
	}
	return &r, nil
}

// releaseStats counts the leader's grants per key token over the last
// minute, in 10-second buckets, for the per-key view (KeyReleases).
type releaseStats struct {
	mu      sync.Mutex
	buckets [6]map[string]int
	at      [6]int64 // each bucket's start, in unix seconds / 10
}

func newReleaseStats() *releaseStats { return &releaseStats{} }

func (s *releaseStats) add(token string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := at.Unix() / 10
	i := int(b % int64(len(s.buckets)))
	if s.at[i] != b || s.buckets[i] == nil {
		s.buckets[i], s.at[i] = make(map[string]int), b
	}
	s.buckets[i][token]++
}

// last is the grants per key over the minute before now, by queue.KeyHash.
func (s *releaseStats) last(now time.Time) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64)
	b := now.Unix() / 10
	for i, m := range s.buckets {
		if b-s.at[i] < int64(len(s.buckets)) {
			for token, n := range m {
				out[queue.KeyHashOfToken(token)] += int64(n)
			}
		}
	}
	return out
}

// publishStats writes the last minute's releases per key every 5 s while
// there were any, until ctx ends.
func (l *leader) publishStats(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	empty := true
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		r := KeyReleases{At: time.Now().UTC(), WindowS: 60, Releases: l.stats.last(time.Now())}
		if len(r.Releases) == 0 && empty {
			continue // nothing new to say: an idle queue writes nothing
		}
		empty = len(r.Releases) == 0
		b, err := json.Marshal(r)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err = l.kv.Put(rctx, KeyReleasesKey(l.queue.Name), b)
		cancel()
		if err != nil && ctx.Err() == nil {
			l.log.Debug("publishing the releases per key failed", "error", err)
		}
	}
}
