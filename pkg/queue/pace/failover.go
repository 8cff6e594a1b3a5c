package pace

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// DefaultPacerDownFor is how long a FailoverPacer that could not reach its
// primary store keeps every worker on the JetStream pacer: each failed
// attempt marks the shared entry down for this long.
const DefaultPacerDownFor = 2 * time.Second

// pacerCheckEvery is how often a FailoverPacer on its primary store reads
// the shared entry to learn whether another worker lost the primary.
const pacerCheckEvery = 250 * time.Millisecond

// FailoverPacer paces with a primary StorePacer — Redis, shared by every
// worker — and falls back to a KVPacer in JetStream when the primary fails,
// so that a Redis outage does not stop the drain. Both pace at the same
// rate, and the two chains never run side by side:
//
//   - A worker whose primary fails books in JetStream and marks the shared
//     entry "primary down" for DownFor, renewed at each of its bookings while
//     the primary keeps failing. Every FailoverPacer reads that mark (at
//     least every 250ms while on the primary) and books in JetStream while
//     it stands — also the workers that can still reach Redis, so a worker
//     cut off from Redis alone does not add a second leak.
//   - The first JetStream booking of a worker starts no earlier than 1/r
//     after its own last start from Redis.
//   - Once the mark has lapsed, a worker tries the primary again; its first
//     bookings there skip the slots up to the JetStream chain's last start,
//     so the Redis chain carries on where the JetStream one ended.
//
// The starts other workers booked from Redis just before the outage are
// unknown (Redis is gone), but bounded: a worker's drainer holds at most two
// bookings. With Peers set, the first JetStream start after a failure is
// put after 2·(Peers+1) slots from now, which costs that many slots once
// per outage and keeps the chains apart; docs/reliability.md gives the
// figures.
//
// A FailoverPacer is safe for concurrent use.
type FailoverPacer struct {
	primary  *StorePacer
	fallback *KVPacer
	// DownFor is how long one failure of the primary keeps every worker on
	// the fallback (default DefaultPacerDownFor). Set before use.
	DownFor time.Duration
	// OnSwitch, if set, is told when this pacer moves to the fallback
	// (err: why) or back to the primary (err nil). Set before use.
	OnSwitch func(fallback bool, err error)
	// Peers, if set, says how many worker processes pace the queue (for a
	// worker.Worker: the grants consumer's waiting pulls). When
	// the primary fails, the first fallback start is put after the starts
	// they may still hold from the primary — at most two each — so that
	// the two chains do not overlap. Unset, only this process's own
	// bookings are waited for. Set before use.
	Peers func(ctx context.Context) int

	mu        sync.Mutex
	onKV      bool
	lastRedis int64     // unix ns of this process's latest start from the primary
	checked   time.Time // when the shared entry was last read while on the primary
}

// NewFailoverPacer paces with primary and, while it fails, with fallback.
// Both must pace the same queue; SetRate sets both.
func NewFailoverPacer(primary *StorePacer, fallback *KVPacer) (*FailoverPacer, error) {
	if primary == nil || fallback == nil {
		return nil, fmt.Errorf("%w: failover pacer: nil pacer", queue.ErrInvalidConfig)
	}
	if primary.queue != fallback.key {
		return nil, fmt.Errorf("%w: failover pacer: queues %s and %s differ", queue.ErrInvalidConfig, primary.queue, fallback.key)
	}
	return &FailoverPacer{primary: primary, fallback: fallback}, nil
}

// SetRate changes the leak rate of both pacers.
func (p *FailoverPacer) SetRate(rate bucket.Rate) error {
	if err := p.primary.SetRate(rate); err != nil {
		return err
	}
	return p.fallback.SetRate(rate)
}

// OnFallback reports whether the last booking came from the fallback.
func (p *FailoverPacer) OnFallback() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.onKV
}

func (p *FailoverPacer) downFor() time.Duration {
	if p.DownFor > 0 {
		return p.DownFor
	}
	return DefaultPacerDownFor
}

// Reserve books the next start from the primary, or from the fallback while
// the primary is (or was lately, for some worker) unreachable.
func (p *FailoverPacer) Reserve(ctx context.Context) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.onKV || now.Sub(p.checked) >= pacerCheckEvery {
		st, _, err := p.fallback.load(ctx)
		if err != nil {
			return 0, err
		}
		p.checked = now
		if st.down > now.UnixNano() {
			// Some worker cannot reach the primary: everybody paces here.
			p.switchTo(true, fmt.Errorf("pace: pacer %s: another worker lost the primary store", p.fallback.key))
			return p.fallback.reserve(ctx, p.floor(), 0)
		}
	}
	wait, err := p.primary.Reserve(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		floor := p.floor()
		if !p.onKV && p.Peers != nil {
			// Just lost the primary: others may hold starts booked there.
			r := p.fallback.Rate()
			floor = max(floor, time.Now().UnixNano()+int64(2*(p.Peers(ctx)+1))*((int64(r.Per)+r.Count-1)/r.Count))
		}
		p.switchTo(true, err)
		return p.fallback.reserve(ctx, floor, time.Now().Add(p.downFor()).UnixNano())
	}
	start := time.Now().Add(wait).UnixNano()
	if p.onKV {
		// Back on the primary: carry on after the fallback's chain, skipping
		// (wasting) the primary's slots before its last start.
		last, lerr := p.fallback.Last(ctx)
		if lerr == nil && !last.IsZero() {
			for range 2 * pacerAhead {
				if start > last.UnixNano() {
					break
				}
				if wait, err = p.primary.Reserve(ctx); err != nil {
					p.switchTo(true, err)
					return p.fallback.reserve(ctx, p.floor(), time.Now().Add(p.downFor()).UnixNano())
				}
				start = time.Now().Add(wait).UnixNano()
			}
		}
		p.switchTo(false, nil)
	}
	p.lastRedis = max(p.lastRedis, start)
	return wait, nil
}

// floor is the earliest start of a fallback booking: 1/r after this
// process's last start from the primary.
func (p *FailoverPacer) floor() int64 {
	if p.lastRedis == 0 {
		return 0
	}
	r := p.fallback.Rate()
	return p.lastRedis + (int64(r.Per)+r.Count-1)/r.Count
}

func (p *FailoverPacer) switchTo(kv bool, err error) {
	if p.onKV == kv {
		return
	}
	p.onKV = kv
	if p.OnSwitch != nil {
		p.OnSwitch(kv, err)
	}
}
