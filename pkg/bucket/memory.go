package bucket

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// DefaultMaxKeys is the number of keys a Memory store tracks by default.
const DefaultMaxKeys = 1_000_000

// ErrInvalidOption is wrapped by the error of an option that cannot be used.
var ErrInvalidOption = errors.New("bucket: invalid option")

// MemoryOption configures a Memory store.
type MemoryOption func(*Memory) error

// WithMaxKeys bounds the number of tracked keys (default 1,000,000). When the
// bound is reached a key not used recently is evicted (CLOCK, the
// second-chance approximation of least recently used); an evicted key
// behaves as a key never seen.
func WithMaxKeys(n int) MemoryOption {
	return func(m *Memory) error {
		if n < 1 || n > 1<<31 {
			return fmt.Errorf("%w: max keys %d: want 1 to 2^31", ErrInvalidOption, n)
		}
		m.maxKeys = n
		return nil
	}
}

// WithClock replaces time.Now as the store's clock (for simulations and
// tests).
func WithClock(now func() time.Time) MemoryOption {
	return func(m *Memory) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		m.now = func() int64 { return now().UnixNano() }
		return nil
	}
}

// Memory is the in-process Store. It is safe for concurrent use: keys are
// spread over shards by a seeded hash, each shard with its own lock.
//
// Each key costs about 42 bytes whatever its length, because the store keeps
// a 64-bit seeded hash of (group, algorithm, key) instead of the key: two
// distinct keys share a bucket with probability about n²/2⁶⁵ (3·10⁻⁸ for a
// million keys), and the seed is random per store so nobody can aim for a
// collision. A sliding_log key also keeps its log (16 bytes per admitted
// job in the window).
//
// A key is forgotten once its state has been back to empty (no decision
// could tell it from a key never seen) for a second, and a key not used
// recently is evicted when the store is full (CLOCK: a hand sweeps each
// shard, a used key gets a second chance). A decision on a known key writes
// only that key's entry, so concurrent callers do not trade cache lines. The
// bound is exact but for one case: a key landing in a shard that holds no
// key while the store is full is let in.
type Memory struct {
	seed    maphash.Seed
	now     func() int64 // Unix ns
	maxKeys int
	shift   uint // 64 − log2(number of shards)
	shards  []shard
	keys    atomic.Int64 // tracked keys over all shards
}

// NewMemory returns an empty memory store.
func NewMemory(opts ...MemoryOption) (*Memory, error) {
	m := &Memory{seed: maphash.MakeSeed(), maxKeys: DefaultMaxKeys}
	m.now = new(wallClock).now
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	// 64 shards, fewer for small stores so that each holds ≥ 64 keys.
	nShards := 64
	for nShards > 1 && m.maxKeys/nShards < 64 {
		nShards /= 2
	}
	m.shift = uint(64 - bits.TrailingZeros(uint(nShards)))
	m.shards = make([]shard, nShards)
	// The bound is global (m.keys); a shard may hold up to twice its fair
	// share, which hashing never reaches in practice, so that eviction is
	// from the shard a new key lands in.
	per := min(m.maxKeys, 2*((m.maxKeys+nShards-1)/nShards))
	for i := range m.shards {
		m.shards[i].max = uint32(per)
		m.shards[i].keys = &m.keys
		m.shards[i].maxKeys = int64(m.maxKeys)
	}
	return m, nil
}

// Decide decides at the store's clock. It never returns an error for a
// valid request; ctx is not used (nothing blocks).
func (m *Memory) Decide(_ context.Context, group string, tiers []Tier, cost int64) (d Decision, err error) {
	err = m.decide(&d, m.now(), group, tiers, cost)
	return d, err
}

// decide sets d, bound to m for its refund.
func (m *Memory) decide(d *Decision, t int64, group string, tiers []Tier, cost int64) error {
	if err := CheckRequest(tiers, cost); err != nil {
		return err
	}
	if len(tiers) == 1 {
		m.decideOne(d, t, group, &tiers[0], cost)
		d.Bind(m, group, tiers, cost)
		return nil
	}
	var (
		hashes  [MaxTiers]uint64
		locks   shardLocks
		results [MaxTiers]tierResult
		expired [MaxTiers]int
	)
	for i := range tiers {
		hashes[i] = m.hash(group, &tiers[i])
		locks.add(uint8(hashes[i] >> m.shift)) // a shift of 64 (one shard) gives 0
	}
	locks.lock(m)
	var c combiner
	c.start(t)
	for i := range tiers {
		expired[i] = m.shardOf(hashes[i]).decide(&results[i], hashes[i], &tiers[i].Limit, t, cost)
		c.add(i, &results[i].TierResult)
	}
	rejected := c.verdict == Rejected
	for i := range tiers {
		m.shardOf(hashes[i]).apply(hashes[i], &tiers[i].Limit, &results[i], expired[i], cost, rejected)
	}
	locks.unlock(m)
	c.finish(d)
	d.Bind(m, group, tiers, cost)
	return nil
}

// shardLocks is the shards of a multi-tier request, locked in index order
// so that two requests never wait for each other's locks.
type shardLocks struct {
	order [MaxTiers]uint8 // shard indexes, sorted, distinct
	n     int
}

func (l *shardLocks) add(s uint8) {
	j := l.n
	for j > 0 && l.order[j-1] > s {
		j--
	}
	if j > 0 && l.order[j-1] == s {
		return
	}
	copy(l.order[j+1:l.n+1], l.order[j:l.n])
	l.order[j] = s
	l.n++
}

func (l *shardLocks) lock(m *Memory) {
	for _, s := range l.order[:l.n] {
		m.shards[s].mu.Lock()
	}
}

func (l *shardLocks) unlock(m *Memory) {
	for _, s := range l.order[:l.n] {
		m.shards[s].mu.Unlock()
	}
}

// Refund gives back, at the store's clock, the units decision d took from
// the tiers in d.Consumed (see Store.Refund), all under the locks of their
// shards at once, as Decide holds them: a settle at 0 (settle.go), which
// gives back the whole cost and creates no state. A key the store has
// forgotten (its state was empty again) or evicted has nothing to give
// back. It never returns an error for a decision this store made; ctx is
// not used.
func (m *Memory) Refund(_ context.Context, d Decision) error {
	return m.settle(m.now(), d, 0)
}

// decideOne is decide for the common single tier: one lock, no arrays.
func (m *Memory) decideOne(d *Decision, t int64, group string, tier *Tier, cost int64) {
	h := m.hash(group, tier)
	sh := m.shardOf(h)
	sh.mu.Lock()
	var r tierResult
	expired := sh.decide(&r, h, &tier.Limit, t, cost)
	sh.apply(h, &tier.Limit, &r, expired, cost, r.Verdict == Rejected)
	sh.mu.Unlock()
	d.single(t, &r.TierResult)
}

// hash identifies (group, algorithm, key): the seeded hash of the key — the
// part a client controls — mixed with an FNV-1a of the group (a queue name
// from configuration) and the algorithm by a multiply-xorshift. Cheaper than
// one streamed hash over the three.
func (m *Memory) hash(group string, t *Tier) uint64 {
	g := uint64(14695981039346656037) ^ uint64(t.Limit.alg)
	for i := 0; i < len(group); i++ {
		g = (g ^ uint64(group[i])) * 1099511628211
	}
	h := maphash.String(m.seed, t.Key) ^ g*0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return h ^ h>>32
}

func (m *Memory) shardOf(h uint64) *shard {
	return &m.shards[h>>m.shift]
}

// MemoryStats counts what a Memory store holds and has dropped.
type MemoryStats struct {
	Keys      int    // keys tracked now
	Evictions uint64 // keys dropped because the store was full
	Forgotten uint64 // keys dropped because their state was empty again
}

// Stats reports the store's counts.
func (m *Memory) Stats() MemoryStats {
	var s MemoryStats
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		s.Keys += int(sh.n)
		s.Evictions += sh.evictions
		s.Forgotten += sh.forgotten
		sh.mu.Unlock()
	}
	return s
}

// entry is one key: 32 bytes.
type entry struct {
	h  uint64
	st state // for a free entry, st.x links the free list
	// mark is the Unix ns at which the state is empty again, with refBit
	// set when the key was used since the clock hand last passed; free for
	// an entry on the free list.
	mark int64
}

const (
	refBit   = int64(1) << 62
	free     = int64(-1)
	maxStamp = refBit - 1 // times beyond 2116 are clamped
)

func (e *entry) expire() int64 { return e.mark &^ refBit }

// shardState is an open-addressing hash table (linear probing, no
// tombstones) over a slab of entries, evicted in CLOCK order: a hand sweeps
// the slab, giving every used entry a second chance.
type shardState struct {
	mu      sync.Mutex
	lastH   uint64   // the key decide looked up last, while no insert or
	lastIdx uint32   // remove has happened since: apply reuses it instead
	lastOK  bool     // of probing again
	table   []uint32 // entry index + 1; 0 is an empty slot
	entries []entry
	freeIdx uint32 // head of the free list
	hand    uint32 // the CLOCK hand
	n       uint32
	max     uint32
	keys    *atomic.Int64 // the store's count of keys
	maxKeys int64
	logs    map[uint32][]logEntry // sliding_log entries by entry index

	evictions, forgotten uint64
}

// shard pads shardState to whole cache lines so that two shards' locks never
// share one.
type shard struct {
	shardState
	_ [64 - unsafe.Sizeof(shardState{})%64]byte
}

func (s *shard) lookup(h uint64) (uint32, bool) {
	if len(s.table) == 0 {
		return 0, false
	}
	mask := uint64(len(s.table) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := s.table[i]
		if v == 0 {
			return 0, false
		}
		if s.entries[v-1].h == h {
			return v - 1, true
		}
	}
}

// find is lookup that reuses decide's probe when it is still valid.
func (s *shard) find(h uint64) (uint32, bool) {
	if s.lastH == h && s.lastOK {
		return s.lastIdx, true
	}
	return s.lookup(h)
}

// decide computes one tier's result from the key's state.
func (s *shard) decide(r *tierResult, h uint64, l *Limit, t, cost int64) (expired int) {
	idx, ok := s.lookup(h)
	s.lastH, s.lastIdx, s.lastOK = h, idx, ok
	if l.alg == SlidingLog {
		var log []logEntry
		if ok {
			log = s.logs[idx]
		}
		return l.slidingLog(r, log, t, cost)
	}
	var st state
	if ok {
		st = s.entries[idx].st
	}
	l.step(r, st, !ok, t, cost)
	return 0
}

// apply commits a tier's result, or, when the decision was rejected, only
// marks the key used: a key that keeps being rejected must not be the one
// evicted.
func (s *shard) apply(h uint64, l *Limit, r *tierResult, expired int, cost int64, rejected bool) {
	if !rejected {
		s.commit(h, l, r, expired, cost)
		return
	}
	if idx, ok := s.find(h); ok {
		if e := &s.entries[idx]; e.mark&refBit == 0 {
			e.mark |= refBit
		}
	}
}

// commit stores a tier's new state (or forgets the key when that state is
// empty) and marks the key used.
func (s *shard) commit(h uint64, l *Limit, r *tierResult, expired int, cost int64) {
	idx, ok := s.find(h)
	if r.ResetAfter <= 0 {
		if ok {
			s.remove(idx)
			s.forgotten++
		}
		return
	}
	if !ok {
		idx = s.insert(h, r.at)
	}
	e := &s.entries[idx]
	e.st = r.next
	e.mark = min(r.at+r.ResetAfter, maxStamp) | refBit
	if l.alg == SlidingLog {
		if s.logs == nil {
			s.logs = make(map[uint32][]logEntry)
		}
		log := s.logs[idx]
		if expired <= len(log) {
			log = log[expired:]
		} else {
			log = nil // evicted meanwhile by another tier of this decision
		}
		if r.Verdict == Admitted {
			log = append(log, logEntry{t: r.at, n: cost})
		}
		s.logs[idx] = log
	}
}

// forgetAfter is how long a key stays after its state is empty again: a key
// in use is not dropped and re-created between two of its jobs.
const forgetAfter = int64(time.Second)

// sweepPerInsert is how many entries the hand visits per new key: idle keys
// leave at least as fast as new ones come, without a background goroutine.
const sweepPerInsert = 4

func (s *shard) insert(h uint64, now int64) uint32 {
	s.sweep(now)
	if s.n > 0 && (s.n >= s.max || s.keys.Load() >= s.maxKeys) {
		s.evict()
	}
	if (s.n+1)*4 > uint32(len(s.table))*3 {
		s.grow()
	}
	var idx uint32
	if int(s.n) < len(s.entries) {
		// Every entry not in use is on the free list.
		idx = s.freeIdx
		s.freeIdx = uint32(s.entries[idx].st.x)
	} else {
		if len(s.entries) == cap(s.entries) {
			// Grow the slab by doubling, but never past the shard's bound.
			c := min(max(16, 2*cap(s.entries)), int(s.max))
			grown := make([]entry, len(s.entries), c)
			copy(grown, s.entries)
			s.entries = grown
		}
		idx = uint32(len(s.entries))
		s.entries = s.entries[:idx+1]
	}
	s.entries[idx] = entry{h: h}
	mask := uint64(len(s.table) - 1)
	i := h & mask
	for s.table[i] != 0 {
		i = (i + 1) & mask
	}
	s.table[i] = idx + 1
	s.n++
	s.keys.Add(1)
	s.lastOK = false
	return idx
}

// advance moves the hand to the next slab entry.
func (s *shard) advance() {
	s.hand++
	if int(s.hand) >= len(s.entries) {
		s.hand = 0
	}
}

// sweep visits a few entries at the hand: it forgets those whose state has
// been empty for forgetAfter and takes away the second chance of the rest.
func (s *shard) sweep(now int64) {
	for range min(sweepPerInsert, len(s.entries)) {
		e := &s.entries[s.hand]
		switch {
		case e.mark == free:
		case e.expire() <= now-forgetAfter:
			s.remove(s.hand)
			s.forgotten++
		default:
			e.mark &^= refBit
		}
		s.advance()
	}
}

// evict removes the first entry at or after the hand without a second
// chance (CLOCK): one not used since the hand last passed it.
func (s *shard) evict() {
	for range 2*len(s.entries) + 1 {
		e := &s.entries[s.hand]
		switch {
		case e.mark == free:
		case e.mark&refBit != 0:
			e.mark &^= refBit
		default:
			s.remove(s.hand)
			s.evictions++
			s.advance()
			return
		}
		s.advance()
	}
}

func (s *shard) grow() {
	size := max(16, 2*len(s.table))
	old := s.table
	s.table = make([]uint32, size)
	mask := uint64(size - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := s.entries[v-1].h & mask
		for s.table[i] != 0 {
			i = (i + 1) & mask
		}
		s.table[i] = v
	}
}

// remove deletes entry idx from the table and the logs and puts it on the
// free list.
func (s *shard) remove(idx uint32) {
	mask := uint64(len(s.table) - 1)
	i := s.entries[idx].h & mask
	for s.table[i] != idx+1 {
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later members of the probe run into
	// the hole when their home slot allows it.
	for j := (i + 1) & mask; s.table[j] != 0; j = (j + 1) & mask {
		home := s.entries[s.table[j]-1].h & mask
		if (j-home)&mask >= (j-i)&mask {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = 0
	if s.logs != nil {
		delete(s.logs, idx)
	}
	s.entries[idx] = entry{st: state{x: int64(s.freeIdx)}, mark: free}
	s.freeIdx = idx
	s.n--
	s.keys.Add(-1)
	s.lastOK = false
}
