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

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/kvwatch"
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

	// cuts are the keys' adaptive rates (PauseCut): the last cut of each
	// key cut in the last LeakClimb+LeakProbe, by key token.
	cuts map[string]LeakState
}

// NewKeyPauses returns a KeyPauses with no key paused.
func NewKeyPauses() *KeyPauses {
	return &KeyPauses{now: time.Now, until: make(map[string]int64), cuts: make(map[string]LeakState), changed: make(chan struct{}, 1), sweepAt: minSweep}
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
	for t, c := range k.cuts {
		if cutGone(c, now) {
			delete(k.cuts, t)
		}
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

// Rate is the adaptive rate of the key whose token is token at now, in
// thousandths of a start per second, for a queue whose leak_rate is
// maxRate (its max), and whether the key's pushbacks cut it below maxRate
// (PauseCut): then the drain starts the key's jobs no faster.
func (k *KeyPauses) Rate(token string, now time.Time, maxRate bucket.Rate) (int64, bool) {
	if k == nil {
		return MilliRate(maxRate), false
	}
	k.mu.Lock()
	st, ok := k.cuts[token]
	k.mu.Unlock()
	m := MilliRate(maxRate)
	if !ok {
		return m, false
	}
	r := st.Rate(now, maxRate, true)
	return r, r < m
}

// cutGone reports whether cut st has no effect left by now (unix ns): the
// rate is back at its max.
func cutGone(st LeakState, now int64) bool {
	return st.CutAt.IsZero() || now-st.CutAt.UnixNano() >= int64(LeakClimb+LeakProbe)
}

// set records that token is paused until until (unix ns), unless a later
// end is known already: a pause is extended, never shortened; and its
// cut, if later than the one known.
func (k *KeyPauses) set(token string, until int64, cut LeakState) {
	k.mu.Lock()
	if !cut.CutAt.IsZero() && cut.CutAt.After(k.cuts[token].CutAt) && !cutGone(cut, k.now().UnixNano()) {
		k.cuts[token] = cut
	}
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
		for t, c := range k.cuts {
			if cutGone(c, now) {
				delete(k.cuts, t)
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
	return k.pause(ctx, kv, q, token, after, nil)
}

// PauseCut pauses the key as Pause does and cuts its own adaptive rate,
// for a queue whose leak_rate is maxRate with adaptive: true, as a
// pushback cuts the queue's (LeakState): to 7/10 of the key's rate now
// (maxRate if it was not cut in the last LeakClimb+LeakProbe), not below
// the floor, unless the key's last pause ended less than leakCutHoldoff
// ago; the rate then climbs back as the queue's does. The cut is kept in
// the key's entry with its pause; the queue's rate is not cut.
func (k *KeyPauses) PauseCut(ctx context.Context, kv jetstream.KeyValue, q, token string, after time.Duration, maxRate bucket.Rate) (time.Time, error) {
	return k.pause(ctx, kv, q, token, after, &maxRate)
}

func (k *KeyPauses) pause(ctx context.Context, kv jetstream.KeyValue, q, token string, after time.Duration, maxRate *bucket.Rate) (time.Time, error) {
	if after <= 0 {
		after = DefaultPushbackPause
	}
	after = min(after, MaxPushbackPause)
	key := KeyPauseKey(q, token)
	for {
		var (
			have int64
			cut  LeakState
			rev  uint64
		)
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return time.Time{}, fmt.Errorf("pace: key pause %s: %w", key, err)
		default:
			rev = e.Revision()
			have, cut, _ = decodeKeyPause(e.Value()) // unreadable: written over
		}
		now := k.now()
		want := now.Add(after).UnixNano()
		next := cut
		if maxRate != nil && (cut.CutAt.IsZero() || cutGone(cut, now.UnixNano()) || now.UnixNano() >= have+int64(leakCutHoldoff)) {
			from := MilliRate(*maxRate)
			if !cutGone(cut, now.UnixNano()) {
				from = cut.Rate(now, *maxRate, true)
			}
			next = LeakState{CutAt: now, From: from, To: max(LeakFloor(*maxRate), mulDiv(from, leakCutNum, leakCutDen))}
		}
		if have >= want && next == cut {
			k.set(token, have, cut)
			return time.Unix(0, have), nil
		}
		want = max(want, have)
		val := encodeKeyPause(want, next)
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
			k.set(token, want, next)
			return time.Unix(0, want), nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Another worker wrote it since we read: read again.
		default:
			return time.Time{}, fmt.Errorf("pace: key pause %s: %w", key, err)
		}
	}
}

// encodeKeyPause is an entry's value: the pause's end in decimal unix ns,
// and, once the key's adaptive rate was cut, the cut's time (unix ns) and
// the rates before and after it (thousandths of a start per second),
// separated by spaces.
func encodeKeyPause(until int64, cut LeakState) []byte {
	b := strconv.AppendInt(nil, until, 10)
	if cut.CutAt.IsZero() {
		return b
	}
	for _, n := range []int64{cut.CutAt.UnixNano(), cut.From, cut.To} {
		b = strconv.AppendInt(append(b, ' '), n, 10)
	}
	return b
}

// decodeKeyPause reads an entry's value (encodeKeyPause).
func decodeKeyPause(b []byte) (int64, LeakState, error) {
	f := strings.Fields(string(b))
	bad := func() (int64, LeakState, error) {
		return 0, LeakState{}, fmt.Errorf("pace: key pause %q: want unix nanoseconds, then optionally the cut's unix nanoseconds and two rates", b)
	}
	if len(f) != 1 && len(f) != 4 {
		return bad()
	}
	var n [4]int64
	for i := range f {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return bad()
		}
		n[i] = v
	}
	var cut LeakState
	if len(f) == 4 {
		cut = LeakState{CutAt: time.Unix(0, n[1]), From: n[2], To: n[3]}
	}
	return n[0], cut, nil
}

// Run follows queue q's key pauses in kv (OpenKeyPushbackBucket) until ctx
// ends, watching again after a failure; while the watch is broken the
// pauses known hold. It closes known once the entries at the start were
// delivered (nil: none told).
func (k *KeyPauses) Run(ctx context.Context, kv jetstream.KeyValue, q string, log *slog.Logger, known chan<- struct{}) {
	kvwatch.Run(ctx, kv, q+".*", known, log, "the queue's key pauses", func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			return // an entry expired or was removed: its end is known
		}
		if until, cut, err := decodeKeyPause(e.Value()); err == nil {
			k.set(strings.TrimPrefix(e.Key(), q+"."), until, cut)
		}
	})
}

// Leak is the leak's maximum rate and whether it is adaptive, as in force
// now (a reload changes them in place: SetRate, SetAdaptive): what a key's
// pushback cuts its own rate from (KeyPauses.PauseCut).
func (p *YieldingPacer) Leak() (maxRate bucket.Rate, adaptive bool) {
	return *p.maxRate.Load(), p.adaptive.Load()
}
