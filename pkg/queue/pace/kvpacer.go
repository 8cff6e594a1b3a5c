package pace

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// PacerBucket is the JetStream key-value bucket that KVPacers keep their
// state in: one key per queue, named after it.
const PacerBucket = "spillway-pacer"

// KVReplicas is the replica count of a key-value bucket asked for as n: 0
// means 1, any other n must be a stream's (queue.ValidateReplicas: 1 to 5).
func KVReplicas(n int) (int, error) {
	if n == 0 {
		return 1, nil
	}
	return n, queue.ValidateReplicas(n)
}

// OpenPacerBucket creates the pacers' key-value bucket, or opens it if it
// exists. It keeps only the latest value of each key; replicas is the
// bucket's replica count (1 to 5; 0 means 1).
func OpenPacerBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: pacer: nil JetStream", queue.ErrInvalidConfig)
	}
	replicas, err := KVReplicas(replicas)
	if err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      PacerBucket,
		Description: "Spillway: the next backlog start of each queue, shared by every worker (docs/reliability.md)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("pace: pacer bucket %s: %w", PacerBucket, err)
	}
	return kv, nil
}

// KVPacer paces a queue's backlog in a JetStream key-value entry, so that
// every worker process connected to the same NATS shares one leak rate —
// no other server is needed.
//
// The pacer is a leaky bucket of delay 0: the first booking after a pause
// starts at once and each following one exactly 1/r after the one before
// it, as StorePacer's. The entry holds the chain of starts in integer
// nanoseconds — an anchor time, the number n of starts booked since it, and
// the rate they were booked at — so that the n-th start after the anchor is
// anchor + ⌈n·per/count⌉, exact for every rate, with no rounding carried
// from one booking to the next. A booking reads the entry, computes its
// start and writes the entry back with Update at the revision it read; a
// writer that lost the race (another worker booked in between) reads again
// and retries, so two bookings never share a start.
//
// # Clocks
//
// JetStream has no "now" a client can read, so a booking uses the clock of
// the machine that makes it: start = max(now, last start + 1/r). Starts are
// spaced 1/r apart in the clock of whoever booked them; if the clocks of
// two worker machines differ by at most Δ, two consecutive starts are at
// least 1/r − Δ apart in real time, but the offset does not add up: over
// any stretch of n starts the real time taken is at least n/r − Δ. Clock
// skew therefore costs at most Δ·r extra starts in any window, never a
// higher rate (with NTP's milliseconds and a leak rate of 100/s, less than
// one job). A machine whose clock runs ahead pushes the chain later, which
// slows nobody once the chain is busy (starts follow the chain, not the
// clock). A machine whose clock is behind by more than 1,024 starts' worth
// books nothing (its starts would be that far ahead) and waits, as it would
// with that many bookings outstanding; the others drain.
//
// # Rate changes
//
// SetRate takes effect at the next booking of any worker that has the new
// rate: it re-anchors the chain at its last start, so the next start is
// 1/r_new after it. Workers that still have the old rate (a reload reaches
// processes at different moments) re-anchor back at their next booking, so
// during a rollout the queue runs at the rate of whoever booked last.
//
// A KVPacer is safe for concurrent use. Reserve is the method callers want.
type KVPacer struct {
	kv   jetstream.KeyValue
	key  string
	rate atomic.Pointer[bucket.Rate]
	now  func() time.Time

	conflicts atomic.Uint64
	bookings  atomic.Uint64

	mu sync.Mutex // one booking of this process at a time: they would only conflict
}

// NewKVPacer paces the backlog of queue at rate in kv (OpenPacerBucket).
func NewKVPacer(kv jetstream.KeyValue, q string, rate bucket.Rate) (*KVPacer, error) {
	if kv == nil {
		return nil, fmt.Errorf("%w: pacer: nil key-value bucket", queue.ErrInvalidConfig)
	}
	if err := spillway.ValidateQueueName(q); err != nil {
		return nil, fmt.Errorf("%w: pacer: %w", queue.ErrInvalidConfig, err)
	}
	p := &KVPacer{kv: kv, key: q, now: time.Now}
	if err := p.SetRate(rate); err != nil {
		return nil, fmt.Errorf("%w: queue %s: %w", queue.ErrInvalidConfig, q, err)
	}
	return p, nil
}

// SetRate changes the leak rate from the next booking on.
func (p *KVPacer) SetRate(rate bucket.Rate) error {
	if _, err := bucket.NewLeakyBucket(rate, 1, 0); err != nil {
		return fmt.Errorf("leak_rate: %w", err)
	}
	p.rate.Store(&rate)
	return nil
}

// Rate is the leak rate the pacer books at.
func (p *KVPacer) Rate() bucket.Rate { return *p.rate.Load() }

// KVPacerStats counts a KVPacer's work since it was made.
type KVPacerStats struct {
	Bookings uint64 // starts booked
	// Conflicts are writes refused because another worker had written
	// the entry since it was read: each costs one more read and write.
	Conflicts uint64
}

// Stats reports the bookings and conflicts so far.
func (p *KVPacer) Stats() KVPacerStats {
	return KVPacerStats{Bookings: p.bookings.Load(), Conflicts: p.conflicts.Load()}
}

// Reserve books the next start of the queue's backlog and says how long to
// wait for it.
func (p *KVPacer) Reserve(ctx context.Context) (time.Duration, error) {
	return p.reserve(ctx, 0, 0)
}

// reserve books a start no earlier than floor (unix ns; a chain that ends
// before it restarts there) and, if down is not 0, marks the shared pacer
// down until then (FailoverPacer).
func (p *KVPacer) reserve(ctx context.Context, floor, down int64) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		start, err := p.book(ctx, p.Rate(), floor, down)
		if err == nil {
			return time.Duration(start - p.now().UnixNano()), nil
		}
		var ahead *aheadError
		if !errors.As(err, &ahead) {
			return 0, err
		}
		// More than pacerAhead bookings are outstanding: wait for one.
		if err := loop.Sleep(ctx, max(ahead.wait, time.Millisecond)); err != nil {
			return 0, err
		}
	}
}

// Last is the latest start booked in the entry (the zero time if none).
func (p *KVPacer) Last(ctx context.Context) (time.Time, error) {
	st, _, err := p.load(ctx)
	if err != nil || st.count == 0 {
		return time.Time{}, err
	}
	return time.Unix(0, st.last()), nil
}

// book writes one booking into the entry, retrying on conflicts, and
// returns its start in unix ns. A chain that ends before floor (unix ns)
// restarts at floor.
func (p *KVPacer) book(ctx context.Context, rate bucket.Rate, floor, down int64) (int64, error) {
	for {
		st, rev, err := p.load(ctx)
		if err != nil {
			return 0, err
		}
		now := p.now().UnixNano()
		next, start := st.book(rate, max(now, floor))
		next.down = max(next.down, down)
		if limit := int64(pacerAhead) * int64(rate.Per) / rate.Count; start-now > limit {
			return 0, &aheadError{wait: time.Duration(start - now - limit)}
		}
		val := next.encode()
		if rev == 0 {
			_, err = p.kv.Create(ctx, p.key, val)
		} else {
			_, err = p.kv.Update(ctx, p.key, val, rev)
		}
		switch {
		case err == nil:
			p.bookings.Add(1)
			return start, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			p.conflicts.Add(1) // another worker booked since we read: read again
		default:
			return 0, fmt.Errorf("pace: pacer %s: %w", p.key, err)
		}
	}
}

// load reads the entry: its state and revision (0: no entry yet).
func (p *KVPacer) load(ctx context.Context) (chain, uint64, error) {
	e, err := p.kv.Get(ctx, p.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return chain{}, 0, nil
	}
	if err != nil {
		return chain{}, 0, fmt.Errorf("pace: pacer %s: %w", p.key, err)
	}
	st, err := decodeChain(e.Value())
	if err != nil {
		// Unreadable (written by something else): start a new chain over it.
		return chain{}, e.Revision(), nil
	}
	return st, e.Revision(), nil
}

// chain is a pacer's state: n starts have been booked after the one at
// anchor (unix ns), count per per apart. count == 0: no booking yet. down
// (unix ns) is when a FailoverPacer's primary store was last said to be
// unreachable until: until then every FailoverPacer paces here.
type chain struct {
	anchor int64
	n      int64
	count  int64
	per    int64
	down   int64
}

// at is the time of the k-th start after the anchor: anchor + ⌈k·per/count⌉,
// computed in 128 bits.
func (c chain) at(k int64) int64 {
	hi, lo := bits.Mul64(uint64(k), uint64(c.per))
	q, r := bits.Div64(hi, lo, uint64(c.count))
	if r != 0 {
		q++
	}
	return c.anchor + int64(q)
}

// last is the latest start booked.
func (c chain) last() int64 { return c.at(c.n) }

// book returns the chain with one more start, booked at now at rate, and
// that start: the chain's next one, or now if the chain ended before now.
func (c chain) book(rate bucket.Rate, now int64) (chain, int64) {
	if c.count != 0 && (c.count != rate.Count || c.per != int64(rate.Per)) {
		// A new rate: the next start is 1/r_new after the last.
		c = chain{anchor: c.last(), count: rate.Count, per: int64(rate.Per), down: c.down}
	}
	if c.count == 0 {
		return chain{anchor: now, count: rate.Count, per: int64(rate.Per), down: c.down}, now
	}
	start := c.at(c.n + 1)
	if start < now {
		// Idle since the last start: a new chain from now.
		return chain{anchor: now, count: c.count, per: c.per, down: c.down}, now
	}
	c.n++
	if c.n == c.count { // keep n small: count starts take exactly per
		c.anchor += c.per
		c.n = 0
	}
	return c, start
}

// encode writes the chain as "anchor n count per down", decimal.
func (c chain) encode() []byte {
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, c.anchor, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, c.n, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, c.count, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, c.per, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, c.down, 10)
	return b
}

func decodeChain(b []byte) (chain, error) {
	f := strings.Fields(string(b))
	if len(f) != 5 {
		return chain{}, fmt.Errorf("pace: pacer state %q: want 5 fields", b)
	}
	var v [5]int64
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return chain{}, fmt.Errorf("pace: pacer state %q: %w", b, err)
		}
		v[i] = n
	}
	c := chain{anchor: v[0], n: v[1], count: v[2], per: v[3], down: v[4]}
	if c.count <= 0 || c.per <= 0 || c.n < 0 || c.n >= c.count {
		return chain{}, fmt.Errorf("pace: pacer state %q: out of range", b)
	}
	return c, nil
}
