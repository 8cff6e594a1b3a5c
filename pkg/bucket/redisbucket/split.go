package redisbucket

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// Split decisions (a Redis Cluster or a Ring): each tier key has a hash tag
// of its own, so the tiers of one decision may live on different shards and
// one script cannot touch them all. A decision is then one script run per
// tag — a part — all sent in one pipeline, which the cluster client sends
// to the shards at once. A part decides its tiers all-or-nothing, as the
// one script does; when one part rejects the job, the parts that took
// their units give them back with the refund script, so that the decision
// as a whole changes nothing (see doc.go, "Cluster").

// part is the tiers of one decision that share a hash tag.
type part struct {
	tag  string
	idx  []int // the decision's tiers in this part, in order
	keys []string
	lims []bucket.Limit
	buf  []byte // the part as decide.lua takes a decision, without header

	// Set by the round trip.
	err       error
	status    int64 // 0, or the part's tier (1-based) holding foreign data
	sec, nsec int64
	res       []bucket.TierResult
}

// rejected reports whether the part's script refused the job (so it
// committed nothing).
func (p *part) rejected() bool {
	for i := range p.res {
		if p.res[i].Verdict == bucket.Rejected {
			return true
		}
	}
	return false
}

// committed reports whether the part's script applied the job.
func (p *part) committed() bool { return p.err == nil && p.status == 0 && !p.rejected() }

// tag is a tier key's hash tag: the group, then a 64-bit FNV-1a hash of the
// key in hex, so that the keys of one group spread over a cluster's slots
// and any key, whatever its bytes, gives a tag without braces.
func tag(group, key string) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	var b [8]byte
	for i := range b {
		b[i] = byte(h >> (56 - 8*i))
	}
	return group + ":" + hex.EncodeToString(b[:])
}

// encodeParts lays out c's decision as one part per hash tag.
func (s *Store) encodeParts(c *call, group string, tiers []bucket.Tier, cost int64) {
	sec, nsec := s.scriptTime() // one time for all the parts of the decision
	cost = min(cost, 1<<53)
	c.group, c.cost, c.ntiers = group, cost, len(tiers)
	c.parts = c.parts[:0]
	for i := range tiers {
		t := tag(group, tiers[i].Key)
		j := 0
		for j < len(c.parts) && c.parts[j].tag != t {
			j++
		}
		if j == len(c.parts) {
			c.parts = append(c.parts, part{tag: t})
		}
		p := &c.parts[j]
		p.idx = append(p.idx, i)
		p.lims = append(p.lims, tiers[i].Limit)
		p.keys = append(p.keys, s.key(group, tiers[i].Limit.Algorithm(), tiers[i].Key))
	}
	for j := range c.parts {
		p := &c.parts[j]
		b := appendDecision(make([]byte, 0, (4+5*len(p.idx))*8), cost, len(p.idx), sec, nsec)
		for k := range p.lims {
			b = appendTier(b, &p.lims[k])
		}
		p.buf = b
	}
}

// tagRequest is one script run of a split round trip: the parts of one tag.
type tagRequest struct {
	parts []*part
	keys  []string
	blob  []byte
}

// runParts runs the parts of calls, one script per tag (parts of one tag in
// the calls' order), in one pipeline, and sets every part's result.
func (s *Store) runParts(ctx context.Context, calls []*call) {
	var reqs []tagRequest
	index := map[string]int{}
	for _, c := range calls {
		for j := range c.parts {
			p := &c.parts[j]
			i, ok := index[p.tag]
			if !ok {
				i = len(reqs)
				index[p.tag] = i
				reqs = append(reqs, tagRequest{blob: make([]byte, headerSize, 256)})
			}
			r := &reqs[i]
			r.parts = append(r.parts, p)
			r.keys = append(r.keys, p.keys...)
			r.blob = append(r.blob, p.buf...)
		}
	}
	for i := range reqs {
		putHeader(reqs[i].blob, len(reqs[i].parts), s.clock != nil, s.ttlExtra)
	}
	cmds := s.runPipelined(ctx, decideScript, len(reqs),
		func(i int) []string { return reqs[i].keys }, func(i int) []byte { return reqs[i].blob })
	for i := range reqs {
		deliverParts(cmds[i], reqs[i].parts)
	}
}

// deliverParts reads one script run's reply into its parts.
func deliverParts(cmd *redis.Cmd, parts []*part) {
	fail := func(err error) {
		for _, p := range parts {
			p.err = err
		}
	}
	if err := cmd.Err(); err != nil {
		fail(fmt.Errorf("redisbucket: %w", err))
		return
	}
	raw, ok := cmd.Val().(string)
	if !ok {
		fail(errMalformed)
		return
	}
	r := reply{s: raw}
	for i, p := range parts {
		if err := decodePart(&r, p); err != nil {
			for _, p := range parts[i:] {
				p.err = err
			}
			return
		}
	}
}

// decodePart reads one part's decision from the reply.
func decodePart(r *reply, p *part) error {
	status, ok1 := r.next()
	sec, ok2 := r.next()
	nsec, ok3 := r.next()
	if !ok1 || !ok2 || !ok3 || status < 0 || int(status) > len(p.keys) {
		return errMalformed
	}
	p.status, p.sec, p.nsec = status, sec, nsec
	if status != 0 {
		return nil
	}
	p.res = p.res[:0]
	for range p.keys {
		var f [tierFields]int64
		for j := range f {
			v, ok := r.next()
			if !ok {
				return errMalformed
			}
			f[j] = v
		}
		if f[0] < 0 || f[0] >= int64(len(verdicts)) {
			return errMalformed
		}
		p.res = append(p.res, bucket.TierResult{
			Verdict:    verdicts[f[0]],
			NotBefore:  f[1]*1e9 + f[2],
			Remaining:  f[3],
			RetryAfter: f[4],
			ResetAfter: f[5],
		})
	}
	return nil
}

// assemble sets c's decision from its parts and reports whether the parts
// that took units must give them back: the decision was rejected, or
// failed, after some parts committed.
func assemble(c *call) (undo bool) {
	var tiers [bucket.MaxTiers]bucket.TierResult
	committed := false
	for j := range c.parts {
		p := &c.parts[j]
		committed = committed || p.committed()
		if c.err != nil {
			continue
		}
		switch {
		case p.err != nil:
			c.err = p.err
		case p.status != 0:
			c.err = fmt.Errorf("%w: tier %d, key %q", ErrForeignData, p.idx[p.status-1], p.keys[p.status-1])
		default:
			for k, i := range p.idx {
				tiers[i] = p.res[k]
			}
		}
	}
	if c.err != nil {
		c.dec = bucket.Decision{}
		return committed
	}
	// The decision's time is the part of its first tier's: each shard reads
	// its own clock.
	p0 := &c.parts[0]
	c.dec = bucket.Combine(p0.sec*1e9+p0.nsec, tiers[:c.ntiers])
	if len(c.parts) > 1 {
		// A refund needs each part's own time: a sliding log's entry is
		// found by its stamp.
		for j := range c.parts {
			p := &c.parts[j]
			for _, i := range p.idx {
				c.dec.TierAt[i] = p.sec*1e9 + p.nsec
			}
		}
	}
	return committed && c.dec.Verdict == bucket.Rejected
}

// settleRequest is one run of settle.lua (a refund is a settle at 0).
type settleRequest struct {
	keys []string
	blob []byte
}

// undoRequests lays out the refunds of the committed parts of calls: each
// part's consumed tiers, at the part's own decision time.
func (s *Store) undoRequests(calls []*call) []settleRequest {
	var out []settleRequest
	for _, c := range calls {
		for j := range c.parts {
			p := &c.parts[j]
			if !p.committed() {
				continue
			}
			var mask uint8
			for k := range p.res {
				if p.res[k].Verdict <= bucket.Queued {
					mask |= 1 << uint(k)
				}
			}
			if mask == 0 {
				continue
			}
			keys, blob := s.settleArgs(p.keys, p.lims, c.cost, p.sec, p.nsec, mask, 0)
			out = append(out, settleRequest{keys: keys, blob: blob})
		}
	}
	return out
}

// settleArgs lays out, for settle.lua, the settle at actual units (0: the
// refund) of the tiers of mask among keys and lims, of a job of cost
// decided at (as, an).
func (s *Store) settleArgs(keys []string, lims []bucket.Limit, cost, as, an int64, mask uint8, actual int64) ([]string, []byte) {
	clock := int64(0)
	if s.clock != nil {
		clock = 1
	}
	sec, nsec := s.scriptTime()
	n := bits.OnesCount8(mask)
	out := make([]string, 0, n)
	b := make([]byte, 0, (9+5*n)*8)
	b = appendNum(b, int64(n))
	b = appendNum(b, clock)
	b = appendNum(b, s.ttlExtra)
	b = appendNum(b, cost)
	b = appendNum(b, as)
	b = appendNum(b, an)
	b = appendNum(b, sec)
	b = appendNum(b, nsec)
	for i := range keys {
		if mask&(1<<uint(i)) != 0 {
			b = appendTier(b, &lims[i])
			out = append(out, keys[i])
		}
	}
	return out, appendNum(b, actual)
}

// runSettles sends settles (refunds: op "refund") in one pipeline and
// returns their errors joined.
func (s *Store) runSettles(ctx context.Context, reqs []settleRequest, op string) error {
	if len(reqs) == 0 {
		return nil
	}
	cmds := s.runPipelined(ctx, settleScript, len(reqs),
		func(i int) []string { return reqs[i].keys }, func(i int) []byte { return reqs[i].blob })
	var errs []error
	for i := range reqs {
		status, err := cmds[i].Int64()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("redisbucket: %s: %w", op, err))
		case status < 0 || int(status) > len(reqs[i].keys):
			errs = append(errs, errMalformed)
		case status > 0:
			errs = append(errs, fmt.Errorf("%w: key %q (nothing %sed)", ErrForeignData, reqs[i].keys[status-1], op))
		}
	}
	return errors.Join(errs...)
}

// roundTripSplit is roundTrip for split decisions: one pipeline of the
// batch's parts, then, if a decision was refused (or failed) after some of
// its parts took their units, one pipeline of refunds giving them back. A
// refund that fails leaves those tiers charged until they refill: a
// refusal too many, never an admission too many.
func (s *Store) roundTripSplit(ctx context.Context, batch []*call) {
	s.runParts(ctx, batch)
	var undo []*call
	for _, c := range batch {
		if assemble(c) {
			undo = append(undo, c)
		}
	}
	_ = s.runSettles(ctx, s.undoRequests(undo), "refund")
}

// splitSettles lays out the settle at actual units (0: the refund) of
// split decision d: one run of settle.lua per tag of the consumed tiers,
// each at the time its tiers were decided.
func (s *Store) splitSettles(group string, tiers []bucket.Tier, cost int64, d bucket.Decision, actual int64) []settleRequest {
	var reqs []settleRequest
	done := uint8(0)
	for i := range tiers {
		bit := uint8(1) << uint(i)
		if d.Consumed&bit == 0 || done&bit != 0 {
			continue
		}
		t := tag(group, tiers[i].Key)
		var keys []string
		var lims []bucket.Limit
		for j := i; j < len(tiers); j++ {
			if b := uint8(1) << uint(j); d.Consumed&b != 0 && done&b == 0 && tag(group, tiers[j].Key) == t {
				done |= b
				keys = append(keys, s.key(group, tiers[j].Limit.Algorithm(), tiers[j].Key))
				lims = append(lims, tiers[j].Limit)
			}
		}
		at := d.At // the tiers of one tag were decided together, at one time
		if d.TierAt[i] != 0 {
			at = time.Unix(0, d.TierAt[i])
		}
		k, blob := s.settleArgs(keys, lims, min(cost, 1<<53), at.Unix(), int64(at.Nanosecond()), 1<<uint(len(keys))-1, actual)
		reqs = append(reqs, settleRequest{keys: k, blob: blob})
	}
	return reqs
}
