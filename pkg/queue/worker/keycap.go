package worker

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
)

// Per-key concurrency in the drain (docs/design.md#per-key-concurrency):
// the leader does not grant a start to a job whose concurrency key is at
// its max. It watches the queue's entries of the key slots' bucket
// (keyslots.Watch) and counts, per key, the jobs holding a slot plus the
// jobs it granted whose slot the watch does not show yet; a flow whose
// first due job has a key at its max is held (fairSched.atMax) until that
// key's entry changes, and the start goes to the next flow. A worker
// whose granted job finds its key at its max after all (a READY job took
// the slot between the grant and the start) still hands the grant back
// (startKeys).

// grantShows is how long after a grant's booked start the leader counts
// its job as holding its keys' slots while the watch does not show it: a
// worker takes the slots at the start. A grant handed back, or a job
// cancelled at its start, is counted no longer after it.
const grantShows = 2 * time.Second

// keyCaps are the leader's view of the key slots.
type keyCaps struct {
	watch *keyslots.Watch
	queue string
	// lease is how long a holder may keep its beat (the ack wait): an
	// entry unchanged for that long holds only dead holders, which a
	// worker that takes a grant of the key removes.
	lease time.Duration
	// granted are, per entry key, the jobs granted whose holder the watch
	// has not shown, and until when they count (unix ns).
	granted map[string]map[string]int64
	sweepAt int
}

func newKeyCaps(q string, lease time.Duration) *keyCaps {
	return &keyCaps{watch: keyslots.NewWatch(), queue: q, lease: lease, granted: map[string]map[string]int64{}, sweepAt: 64}
}

// atMax reports the entry key of the first of keys at its max by now
// ("" if none), and when that may end without a change of the entry: a
// grant it counts stops counting, or its holders have not beaten for a
// lease (math.MaxInt64: only at a change).
func (c *keyCaps) atMax(keys []queue.ConcurrencyKey, now int64) (string, int64) {
	for _, k := range keys {
		ek := keyslots.EntryKey(c.queue, k.Name, k.Token)
		jobs, changed := c.watch.Holders(ek)
		n, until := 0, int64(math.MaxInt64)
		if len(jobs) > 0 {
			// Its holders count while one of them may be alive: a live
			// holder's beat changes the entry every lease/3.
			if dead := changed.UnixNano() + int64(c.lease); dead > now {
				n, until = len(jobs), dead
			}
		}
		for job, end := range c.granted[ek] {
			switch {
			case end <= now || slices.Contains(jobs, job):
				delete(c.granted[ek], job)
			default:
				n, until = n+1, min(until, end)
			}
		}
		if len(c.granted[ek]) == 0 {
			delete(c.granted, ek)
		}
		if n >= k.Max {
			return ek, until
		}
	}
	return "", 0
}

// grant counts job j, granted a start at start, as holding its keys'
// slots until the watch shows it, or grantShows after the start.
func (c *keyCaps) grant(j pendingJob, start time.Time) {
	if len(j.conc) == 0 {
		return
	}
	if len(c.granted) >= c.sweepAt {
		now := time.Now().UnixNano()
		for ek, m := range c.granted {
			for job, end := range m {
				if end <= now {
					delete(m, job)
				}
			}
			if len(m) == 0 {
				delete(c.granted, ek)
			}
		}
		c.sweepAt = max(64, 2*len(c.granted))
	}
	end := start.Add(grantShows).UnixNano()
	for _, k := range j.conc {
		ek := keyslots.EntryKey(c.queue, k.Name, k.Token)
		if c.granted[ek] == nil {
			c.granted[ek] = map[string]int64{}
		}
		c.granted[ek][j.id] = end
	}
}

// watchCaps follows the key slots while the leader leads, and makes the
// scheduler hold the flows whose keys are at their max. It returns once
// the holders at the start are known (or after requestTimeout).
func (l *leader) watchCaps(ctx context.Context) {
	if l.caps == nil {
		return
	}
	known := make(chan struct{})
	go l.caps.watch.Run(ctx, l.drainStreams.keys, l.queue.Name, l.log, known)
	select {
	case <-known:
	case <-ctx.Done():
	case <-time.After(requestTimeout):
		l.log.Warn("the key slots' holders are not known yet; granting until the watch tells them", "after", requestTimeout)
	}
	l.sched.atMax = l.caps.atMax
}

// recheckCaps looks again at the flows held for the keys whose slots
// changed since the last look.
func (l *leader) recheckCaps() {
	if l.caps == nil {
		return
	}
	now := time.Now().UnixNano()
	for _, ek := range l.caps.watch.TakeChanged() {
		l.sched.recheck(ek, now)
	}
}

// capsChanged is told when a key's slots change (nil: never).
func (l *leader) capsChanged() <-chan struct{} {
	if l.caps == nil {
		return nil
	}
	return l.caps.watch.Changed()
}

// granted counts job j of flow f, granted a start at start, as holding
// its keys' slots, and looks at f again: its next job may be held now.
func (l *leader) grantedKeys(f *flow, j pendingJob, start time.Time) {
	if l.caps == nil || len(j.conc) == 0 {
		return
	}
	l.caps.grant(j, start)
	if len(f.window) > 0 {
		l.sched.place(f, time.Now().UnixNano())
	}
}

// keyCapped reports whether job j of flow f, picked, must not be granted:
// one of its keys is at its max (the scheduler held flows by what it
// knew when it placed them). The job goes back to its flow, which waits
// for a slot.
func (l *leader) keyCapped(f *flow, j pendingJob) bool {
	if l.caps == nil || len(j.conc) == 0 {
		return false
	}
	if ek, _ := l.caps.atMax(j.conc, time.Now().UnixNano()); ek == "" {
		return false
	}
	l.sched.putBack(f.subject, j, time.Now().UnixNano())
	return true
}
