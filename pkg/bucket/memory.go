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
)

// DefaultMaxKeys is the number of keys a Memory store tracks by default.
const DefaultMaxKeys = 1_000_000

// ErrInvalidOption is wrapped by the error of an option that cannot be used.
var ErrInvalidOption = errors.New("bucket: invalid option")

// MemoryOption configures a Memory store.
type MemoryOption func(*Memory) error

// WithMaxKeys bounds the number of tracked keys (default 1,000,000). When the
// bound is reached the least recently used key is evicted; an evicted key
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
		m.now = now
		return nil
	}
}

// Memory is the in-process Store. It is safe for concurrent use: keys are
// spread over shards by a seeded hash, each shard with its own lock.
//
// Each key costs about 48 bytes whatever its length, because the store keeps
// a 64-bit seeded hash of (group, algorithm, key) instead of the key: two
// distinct keys share a bucket with probability about n²/2⁶⁵ (3·10⁻⁸ for a
// million keys), and the seed is random per store so nobody can aim for a
// collision. A sliding_log key also keeps its log (16 bytes per admitted
// job in the window).
//
// A key is forgotten once its state is back to empty (no decision could tell
// it from a key never seen), and the least recently used key is evicted when
// the store is full. The bound is exact but for one case: a key landing in a
// shard that holds no key while the store is full is let in.
type Memory struct {
	seed    maphash.Seed
	now     func() time.Time
	maxKeys int
	shift   uint // 64 − log2(number of shards)
	shards  []shard
	keys    atomic.Int64 // tracked keys over all shards
}

// NewMemory returns an empty memory store.
func NewMemory(opts ...MemoryOption) (*Memory, error) {
	m := &Memory{seed: maphash.MakeSeed(), now: time.Now, maxKeys: DefaultMaxKeys}
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
func (m *Memory) Decide(_ context.Context, group string, tiers []Tier, cost int64) (Decision, error) {
	return m.DecideAt(m.now(), group, tiers, cost)
}

// DecideAt decides at the given time: the form for simulations, where time
// is a parameter.
func (m *Memory) DecideAt(now time.Time, group string, tiers []Tier, cost int64) (Decision, error) {
	if err := CheckRequest(tiers, cost); err != nil {
		return Decision{}, err
	}
	t := now.UnixNano()
	var (
		hashes  [MaxTiers]uint64
		order   [MaxTiers]uint8 // shard indexes, sorted, distinct
		nLocked int
		results [MaxTiers]tierResult
		exports [MaxTiers]TierResult
		expired [MaxTiers]int
	)
	for i := range tiers {
		h := m.hash(group, &tiers[i])
		hashes[i] = h
		s := uint8(h >> m.shift) // a shift of 64 (one shard) gives 0
		j := nLocked
		for j > 0 && order[j-1] > s {
			j--
		}
		if j > 0 && order[j-1] == s {
			continue
		}
		copy(order[j+1:nLocked+1], order[j:nLocked])
		order[j] = s
		nLocked++
	}
	for _, s := range order[:nLocked] {
		m.shards[s].mu.Lock()
	}
	rejected := false
	for i := range tiers {
		sh := m.shardOf(hashes[i])
		l := &tiers[i].Limit
		idx, ok := sh.lookup(hashes[i])
		if l.alg == SlidingLog {
			var log []logEntry
			if ok {
				log = sh.logs[idx]
			}
			results[i], expired[i] = l.slidingLog(log, t, cost)
		} else {
			var st state
			if ok {
				st = sh.entries[idx].st
			}
			results[i] = l.step(st, !ok, t, cost)
		}
		exports[i] = results[i].export()
		rejected = rejected || results[i].verdict == Rejected
	}
	for i := range tiers {
		sh := m.shardOf(hashes[i])
		if rejected {
			// Nothing changes, but the key was used: a key that keeps
			// being rejected must not be the one evicted.
			if idx, ok := sh.lookup(hashes[i]); ok {
				sh.unlink(idx)
				sh.pushFront(idx)
			}
			continue
		}
		sh.commit(hashes[i], &tiers[i].Limit, &results[i], expired[i], cost)
	}
	for _, s := range order[:nLocked] {
		m.shards[s].sweep(t)
		m.shards[s].mu.Unlock()
	}
	return Combine(t, exports[:len(tiers)]), nil
}

func (m *Memory) hash(group string, t *Tier) uint64 {
	var h maphash.Hash
	h.SetSeed(m.seed)
	h.WriteString(group)
	h.WriteByte(0)
	h.WriteByte(byte(t.Limit.alg))
	h.WriteString(t.Key)
	return h.Sum64()
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

// nilIdx marks the end of an LRU or free list.
const nilIdx = ^uint32(0)

// entry is one key: 40 bytes.
type entry struct {
	h          uint64
	st         state
	expire     int64  // Unix ns when the state is empty again
	prev, next uint32 // LRU neighbours (most recent first), or the free list
}

// shard is an open-addressing hash table (linear probing, no tombstones)
// over a slab of entries kept in LRU order.
type shard struct {
	mu        sync.Mutex
	table     []uint32 // entry index + 1; 0 is an empty slot
	entries   []entry
	free      uint32 // head of the free list
	head      uint32 // most recently used
	tail      uint32 // least recently used
	n         uint32
	max       uint32
	keys      *atomic.Int64 // the store's count of keys
	maxKeys   int64
	logs      map[uint32][]logEntry // sliding_log entries by entry index
	evictions uint64
	forgotten uint64
	_         [64]byte // keep neighbouring shards' locks off one cache line
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

// commit stores a tier's new state (or forgets the key when that state is
// empty) and marks the key most recently used.
func (s *shard) commit(h uint64, l *Limit, r *tierResult, expired int, cost int64) {
	idx, ok := s.lookup(h)
	if r.resetAfter <= 0 {
		if ok {
			s.remove(idx)
			s.forgotten++
		}
		return
	}
	if !ok {
		idx = s.insert(h)
	} else {
		s.unlink(idx)
	}
	e := &s.entries[idx]
	e.st = r.next
	e.expire = r.at + r.resetAfter
	s.pushFront(idx)
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
		if r.verdict == Admitted {
			log = append(log, logEntry{t: r.at, n: cost})
		}
		s.logs[idx] = log
	}
}

func (s *shard) insert(h uint64) uint32 {
	if s.n > 0 && (s.n >= s.max || s.keys.Load() >= s.maxKeys) {
		s.evictions++
		s.remove(s.tail)
	}
	if (s.n+1)*4 > uint32(len(s.table))*3 {
		s.grow()
	}
	var idx uint32
	if s.hasFree() {
		idx = s.free
		s.free = s.entries[idx].next
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
	s.entries[idx] = entry{h: h, prev: nilIdx, next: nilIdx}
	mask := uint64(len(s.table) - 1)
	i := h & mask
	for s.table[i] != 0 {
		i = (i + 1) & mask
	}
	s.table[i] = idx + 1
	s.n++
	s.keys.Add(1)
	return idx
}

// hasFree reports whether the free list holds an entry: the slab only grows,
// and every entry not in use is on the list.
func (s *shard) hasFree() bool {
	return int(s.n) < len(s.entries)
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
	if len(old) == 0 {
		s.head, s.tail, s.free = nilIdx, nilIdx, nilIdx
	}
}

// remove deletes entry idx from the table, the LRU list and the logs, and
// puts it on the free list.
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
	s.unlink(idx)
	if s.logs != nil {
		delete(s.logs, idx)
	}
	s.entries[idx] = entry{next: s.free}
	s.free = idx
	s.n--
	s.keys.Add(-1)
}

func (s *shard) unlink(idx uint32) {
	e := &s.entries[idx]
	if e.prev != nilIdx {
		s.entries[e.prev].next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nilIdx {
		s.entries[e.next].prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nilIdx, nilIdx
}

func (s *shard) pushFront(idx uint32) {
	e := &s.entries[idx]
	e.prev, e.next = nilIdx, s.head
	if s.head != nilIdx {
		s.entries[s.head].prev = idx
	} else {
		s.tail = idx
	}
	s.head = idx
}

// sweep forgets up to two least recently used keys whose state is empty at
// now, so that idle keys leave without a background goroutine.
func (s *shard) sweep(now int64) {
	for range 2 {
		if s.n == 0 || s.entries[s.tail].expire > now {
			return
		}
		s.remove(s.tail)
		s.forgotten++
	}
}
