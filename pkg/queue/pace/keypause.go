package pace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
)

// A queue whose pushback scope is its keys (queue.PushbackKey) pauses only
// the key of a job whose downstream pushed back (docs/design.md#pushback):
// the drain's leader grants none of that key's jobs until the pause ends,
// and the other keys take its share of the leak. The pause of a key is one
// entry of KeyPushbackBucket, <queue>.<key token>, holding its end; every
// worker follows the queue's entries (KeyPauses.Run), so that a leader
// that takes over knows the keys paused before it.

// KeyPushbackBucket is the JetStream key-value bucket of the keys' pauses.
// Its entries expire keyPauseTTL after their last write — after the
// longest pause one write can make — so the bucket holds only the keys
// pushed back in the last minute or so, however many keys a queue has.
const KeyPushbackBucket = "spillway-key-pushback"

// keyPauseTTL is how long a key's pause entry is kept after its last
// write: longer than MaxPushbackPause, so no entry expires before its end.
const keyPauseTTL = MaxPushbackPause + 10*time.Second

// OpenKeyPushbackBucket creates the keys' pause bucket, or opens it if it
// exists; replicas as OpenPacerBucket's.
func OpenKeyPushbackBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: key pushback: nil JetStream", queue.ErrInvalidConfig)
	}
	replicas, err := KVReplicas(replicas)
	if err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      KeyPushbackBucket,
		Description: "Spillway: the end of each pushed-back key's pause, per queue (docs/design.md#pushback)",
		History:     1,
		TTL:         keyPauseTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("pace: key pushback bucket %s: %w", KeyPushbackBucket, err)
	}
	return kv, nil
}

// KeyPauseKey is the entry of the pause of the key whose token
// (queue.KeyToken) is token, in queue q.
func KeyPauseKey(q, token string) string { return q + "." + token }

// KeyPauses follows the paused keys of a queue: the end of each one's
// pause, by key token. Pause writes a pause (and keeps it here at once);
// Run follows the pauses every worker writes. The zero value is not
// usable: use NewKeyPauses. Safe for concurrent use; a nil *KeyPauses has
// no key paused.
type KeyPauses struct {
	now    func() time.Time
	pauses atomic.Uint64

	mu      sync.Mutex
	until   map[string]int64 // key token → its pause's end, unix ns
	version uint64           // grows at every change of until
	changed chan struct{}    // told (without blocking) at every change
	sweepAt int              // the size of until at which set forgets the pauses that ended
}

// NewKeyPauses returns a KeyPauses with no key paused.
func NewKeyPauses() *KeyPauses {
	return &KeyPauses{now: time.Now, until: make(map[string]int64), changed: make(chan struct{}, 1), sweepAt: minSweep}
}

// Until is the end of the pause of the key whose token is token: zero or
// past when it is not paused.
func (k *KeyPauses) Until(token string) time.Time {
	if k == nil {
		return time.Time{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if u, ok := k.until[token]; ok {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// Version grows at every change of a key's pause: a caller that saw
// version v needs to look at the pauses again (Each) when it has grown.
func (k *KeyPauses) Version() uint64 {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.version
}

// Changed is told at every change of a key's pause. Only one reader
// should wait on it: a change told while nobody reads is kept until the
// next read, the ones after it merged into it.
func (k *KeyPauses) Changed() <-chan struct{} {
	if k == nil {
		return nil
	}
	return k.changed
}

// Each calls fn with every key paused now and its pause's end, and
// forgets the pauses that ended. It returns the Version it saw.
func (k *KeyPauses) Each(fn func(token string, until time.Time)) uint64 {
	if k == nil {
		return 0
	}
	now := k.now().UnixNano()
	k.mu.Lock()
	type paused struct {
		token string
		until int64
	}
	list := make([]paused, 0, len(k.until))
	for t, u := range k.until {
		if u <= now {
			delete(k.until, t)
			continue
		}
		list = append(list, paused{t, u})
	}
	v := k.version
	k.mu.Unlock()
	for _, p := range list {
		fn(p.token, time.Unix(0, p.until))
	}
	return v
}

// Pauses counts the key pauses this process began (a pushback of a key
// not paused at the time); the sum over all workers is the queue's.
func (k *KeyPauses) Pauses() uint64 {
	if k == nil {
		return 0
	}
	return k.pauses.Load()
}

// set records that token is paused until until (unix ns), unless a later
// end is known already: a pause is extended, never shortened.
func (k *KeyPauses) set(token string, until int64) {
	k.mu.Lock()
	if until <= k.until[token] || until <= k.now().UnixNano() {
		k.mu.Unlock()
		return
	}
	k.until[token] = until
	k.version++
	if len(k.until) >= k.sweepAt {
		// Forget the pauses that ended, now and then: a worker that does
		// not lead (Each) holds only the keys paused lately.
		now := k.now().UnixNano()
		for t, u := range k.until {
			if u <= now {
				delete(k.until, t)
			}
		}
		k.sweepAt = max(minSweep, 2*len(k.until))
	}
	k.mu.Unlock()
	select {
	case k.changed <- struct{}{}:
	default:
	}
}

// minSweep is the least number of pauses KeyPauses holds before it
// forgets those that ended.
const minSweep = 64

// Pause pauses, on every worker, the key of queue q whose token is token
// until after from now (0: DefaultPushbackPause; capped at
// MaxPushbackPause), extending a pause in force, never shortening it. The
// entry is written with compare-and-set. It returns the pause's end.
func (k *KeyPauses) Pause(ctx context.Context, kv jetstream.KeyValue, q, token string, after time.Duration) (time.Time, error) {
	if after <= 0 {
		after = DefaultPushbackPause
	}
	after = min(after, MaxPushbackPause)
	key := KeyPauseKey(q, token)
	for {
		var (
			have int64
			rev  uint64
		)
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return time.Time{}, fmt.Errorf("pace: key pause %s: %w", key, err)
		default:
			rev = e.Revision()
			have, _ = decodeKeyPause(e.Value()) // unreadable: written over
		}
		now := k.now()
		want := now.Add(after).UnixNano()
		if have >= want {
			k.set(token, have)
			return time.Unix(0, have), nil
		}
		val := strconv.AppendInt(nil, want, 10)
		if rev == 0 {
			_, err = kv.Create(ctx, key, val)
		} else {
			_, err = kv.Update(ctx, key, val, rev)
		}
		switch {
		case err == nil:
			if have <= now.UnixNano() {
				k.pauses.Add(1)
			}
			k.set(token, want)
			return time.Unix(0, want), nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Another worker wrote it since we read: read again.
		default:
			return time.Time{}, fmt.Errorf("pace: key pause %s: %w", key, err)
		}
	}
}

// decodeKeyPause reads an entry's value: the pause's end, decimal unix ns.
func decodeKeyPause(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("pace: key pause %q: want unix nanoseconds", b)
	}
	return n, nil
}

// Run follows queue q's key pauses in kv (OpenKeyPushbackBucket) until ctx
// ends, watching again after a failure; while the watch is broken the
// pauses known hold. It closes known once the entries at the start were
// delivered (nil: none told).
func (k *KeyPauses) Run(ctx context.Context, kv jetstream.KeyValue, q string, log *slog.Logger, known chan<- struct{}) {
	var once sync.Once
	told := func() {
		if known != nil {
			once.Do(func() { close(known) })
		}
	}
	defer told()
	for failures := 0; ctx.Err() == nil; {
		err := k.watch(ctx, kv, q, told)
		if ctx.Err() != nil {
			return
		}
		failures++
		log.Warn("watching the queue's key pauses failed; watching again", "error", err, "failures", failures)
		_ = loop.Sleep(ctx, loop.Backoff(failures))
	}
}

func (k *KeyPauses) watch(ctx context.Context, kv jetstream.KeyValue, q string, known func()) error {
	w, err := kv.Watch(ctx, q+".*")
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("pace: the key pause watch ended")
			}
			if e == nil { // the initial values are all delivered
				known()
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue // an entry expired or was removed: its end is known
			}
			if until, err := decodeKeyPause(e.Value()); err == nil {
				k.set(strings.TrimPrefix(e.Key(), q+"."), until)
			}
		}
	}
}
