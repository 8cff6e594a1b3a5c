package redisbucket

import (
	_ "embed" // the scripts
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// The scripts are lib.lua (shared helpers) followed by decide.lua or
// settle.lua, whose tops describe their argument and reply layouts.
var (
	//go:embed lib.lua
	luaLib string
	//go:embed decide.lua
	luaDecide string
	//go:embed settle.lua
	luaSettle string
)

var (
	// decideScript decides: every decision, every algorithm.
	decideScript = redis.NewScript(luaLib + luaDecide)
	// settleScript settles the cost of one decision's consumed tiers; a
	// refund is its settle at 0.
	settleScript = redis.NewScript(luaLib + luaSettle)
)

// headerSize is the script header: decisions, clock flag, TTL extra.
const headerSize = 3 * 8

var zeroHeader [headerSize]byte

// verdicts maps the script's verdict codes to bucket's.
var verdicts = [...]bucket.Verdict{bucket.Admitted, bucket.Queued, bucket.Excess, bucket.Rejected}

// Algorithm codes of the script, independent of bucket.Algorithm's values.
const (
	algLeaky   = 0
	algToken   = 1
	algFixed   = 2
	algLog     = 3
	algSliding = 4
)

// tierFields is how many doubles the script returns per tier.
const tierFields = 6

func appendNum(b []byte, v int64) []byte {
	// Every number the store sends is an integer below 2^53 in magnitude
	// (pkg/bucket's validation), so the double is exact.
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
}

// scriptTime is the injected clock's time as the scripts take it, in
// seconds and nanoseconds; zeros without one (the scripts read Redis's).
func (s *Store) scriptTime() (sec, nsec int64) {
	if s.clock == nil {
		return 0, 0
	}
	now := s.clock()
	return now.Unix(), int64(now.Nanosecond())
}

// appendDecision lays out one decision for decide.lua after the header:
// its cost, its tier count and the time (scriptTime); the tiers'
// parameters (appendTier) follow.
func appendDecision(b []byte, cost int64, tiers int, sec, nsec int64) []byte {
	b = appendNum(b, cost)
	b = appendNum(b, int64(tiers))
	b = appendNum(b, sec)
	return appendNum(b, nsec)
}

// putHeader writes the script header into b[:headerSize].
func putHeader(b []byte, decisions int, clock bool, extraMS int64) {
	c := int64(0)
	if clock {
		c = 1
	}
	binary.LittleEndian.PutUint64(b[0:], math.Float64bits(float64(decisions)))
	binary.LittleEndian.PutUint64(b[8:], math.Float64bits(float64(c)))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(float64(extraMS)))
}

// encode lays out one decision for the script: its keys, and cost, tier
// count, time and tier parameters after a reserved header.
func (s *Store) encode(c *call, group string, tiers []bucket.Tier, cost int64) {
	// A cost beyond 2^53 exceeds every limit; the script only compares it.
	cost = min(cost, 1<<53)
	b := c.buf[:0]
	b = append(b, zeroHeader[:]...)
	sec, nsec := s.scriptTime()
	b = appendDecision(b, cost, len(tiers), sec, nsec)
	keys := c.keys[:0]
	for i := range tiers {
		b = appendTier(b, &tiers[i].Limit)
		keys = append(keys, s.key(group, tiers[i].Limit.Algorithm(), tiers[i].Key))
	}
	c.buf, c.keys, c.group = b, keys, group
}

// appendTier lays out a tier's algorithm and parameters for either script.
func appendTier(b []byte, l *bucket.Limit) []byte {
	var code, p1, p2, p3, p4 int64
	switch l.Algorithm() {
	case bucket.LeakyBucket:
		code = algLeaky
		p1, p2 = l.Scaled()
		p3, p4 = l.Burst(), l.Delay()
	case bucket.TokenBucket:
		code = algToken
		p1, p2 = l.Scaled()
		p3 = l.Burst()
	case bucket.FixedWindow:
		code, p1, p2 = algFixed, l.Count(), int64(l.Window())
	case bucket.SlidingLog:
		code, p1, p2 = algLog, l.Count(), int64(l.Window())
	default:
		code, p1, p2 = algSliding, l.Count(), int64(l.Window())
	}
	b = appendNum(b, code)
	b = appendNum(b, p1)
	b = appendNum(b, p2)
	b = appendNum(b, p3)
	return appendNum(b, p4)
}

// encodeSettle lays out the settle at actual units (0: the refund) of
// decision d's consumed tiers for settle.lua: its keys and its argument.
func (s *Store) encodeSettle(group string, tiers []bucket.Tier, cost int64, d bucket.Decision, actual int64) ([]string, []byte) {
	keys := make([]string, len(tiers))
	lims := make([]bucket.Limit, len(tiers))
	for i := range tiers {
		if d.Consumed&(1<<uint(i)) != 0 {
			keys[i] = s.key(group, tiers[i].Limit.Algorithm(), tiers[i].Key)
		}
		lims[i] = tiers[i].Limit
	}
	// cost as decide.lua received it
	return s.settleArgs(keys, lims, min(cost, 1<<53), d.At.Unix(), int64(d.At.Nanosecond()), d.Consumed, actual)
}

// key is <prefix>{<group>:<hash>}:<algorithm>:<tier key>, <hash> 16 hex
// digits of the tier key's hash (tag in split.go). The hash tag holds the
// tier key's hash, so that the keys of one group spread over a cluster's
// slots; the tiers of one decision may then be in different slots (split.go
// decides them).
func (s *Store) key(group string, alg bucket.Algorithm, key string) string {
	return s.Key(group, alg, key)
}

// Key returns the Redis key that holds the state of tier key key of group
// under algorithm alg: <prefix>{<group>:<hash>}:<algorithm>:<key>, <hash>
// being 16 hex digits of the key's 64-bit FNV-1a hash. For operators and
// tests that look at one key's state.
func (s *Store) Key(group string, alg bucket.Algorithm, key string) string {
	return s.prefix + "{" + tag(group, key) + "}:" + alg.String() + ":" + key
}

// reply reads the script's answer, one double at a time.
type reply struct {
	s   string
	off int
}

func (r *reply) next() (int64, bool) {
	if r.off+8 > len(r.s) {
		return 0, false
	}
	u := uint64(r.s[r.off]) | uint64(r.s[r.off+1])<<8 | uint64(r.s[r.off+2])<<16 | uint64(r.s[r.off+3])<<24 |
		uint64(r.s[r.off+4])<<32 | uint64(r.s[r.off+5])<<40 | uint64(r.s[r.off+6])<<48 | uint64(r.s[r.off+7])<<56
	r.off += 8
	f := math.Float64frombits(u)
	if f != math.Trunc(f) || math.Abs(f) >= 1<<62 {
		return 0, false
	}
	return int64(f), true
}

// decode reads one decision of c from the reply.
func decode(r *reply, c *call) (bucket.Decision, error) {
	status, ok1 := r.next()
	sec, ok2 := r.next()
	nsec, ok3 := r.next()
	if !ok1 || !ok2 || !ok3 {
		return bucket.Decision{}, errMalformed
	}
	if status != 0 {
		if status < 1 || int(status) > len(c.keys) {
			return bucket.Decision{}, errMalformed
		}
		return bucket.Decision{}, fmt.Errorf("%w: tier %d, key %q", ErrForeignData, status-1, c.keys[status-1])
	}
	var tiers [bucket.MaxTiers]bucket.TierResult
	for i := range c.keys {
		var f [tierFields]int64
		for j := range f {
			v, ok := r.next()
			if !ok {
				return bucket.Decision{}, errMalformed
			}
			f[j] = v
		}
		if f[0] < 0 || f[0] >= int64(len(verdicts)) {
			return bucket.Decision{}, errMalformed
		}
		tiers[i] = bucket.TierResult{
			Verdict:    verdicts[f[0]],
			NotBefore:  f[1]*int64(time.Second) + f[2],
			Remaining:  f[3],
			RetryAfter: f[4],
			ResetAfter: f[5],
		}
	}
	return bucket.Combine(sec*int64(time.Second)+nsec, tiers[:len(c.keys)]), nil
}
