package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// With pushback scope key (queue.PushbackKey), a handler's pushback pauses
// only its job's key (docs/design.md#pushback): the pause is shared state
// (pace.KeyPauses, followed by every worker), the leader holds the key's
// flows until its end (fairSched.hold) and grants no start inside it, and
// a worker whose granted start comes inside it hands the grant back until
// the pause's end. With an adaptive leak the pushback also cuts the key's
// own rate (pace.KeyPauses.PauseCut), kept in the same entry: the leader
// holds the key's flows after each start it grants them for one start's
// share of that rate (paceKey), and the other keys take the rest of the
// leak; the queue's rate is not cut.

// holdPausedKeys makes the scheduler ask the key pauses when it makes a
// flow, so that a flow made while its key is paused waits for the end.
func (l *leader) holdPausedKeys() {
	if l.keys == nil {
		return
	}
	l.sched.heldUntil = func(token string) int64 {
		held := l.keyNext[token]
		if u := l.keys.Until(token); !u.IsZero() {
			held = max(held, u.UnixNano())
		}
		return held
	}
}

// holdKeys holds the flows of the keys paused since the scheduler last
// looked.
func (l *leader) holdKeys() {
	if l.keys == nil || l.keys.Version() == l.keysSeen {
		return
	}
	now := time.Now().UnixNano()
	l.keysSeen = l.keys.Each(func(token string, until time.Time) {
		l.sched.hold(token, until.UnixNano(), now)
	})
}

// paceKey holds the flows of f's key, whose job was granted a start at
// start, for one start's share of the key's adaptive rate, if a pushback
// cut it: its next start is not before start + 1/rate.
func (l *leader) paceKey(f *flow, start time.Time) {
	if l.keys == nil {
		return
	}
	maxRate, adaptive := l.leak()
	if !adaptive {
		return
	}
	token := queue.SubjectToken(f.subject)
	rate, cut := l.keys.Rate(token, start, maxRate)
	if !cut || rate <= 0 {
		return
	}
	// rate is in thousandths of a start per second: one start's share is
	// ⌈10¹²/rate⌉ ns.
	const milliNs = 1_000_000_000_000
	next := start.UnixNano() + (milliNs+rate-1)/rate
	now := time.Now().UnixNano()
	if len(l.keyNext) >= l.keyNextSweep {
		for t, n := range l.keyNext {
			if n <= now {
				delete(l.keyNext, t)
			}
		}
		l.keyNextSweep = max(64, 2*len(l.keyNext))
	}
	l.keyNext[token] = next
	l.sched.hold(token, next, now)
}

// keyHeld reports whether job j of flow f, booked to start at start, must
// not: its key is paused past the start. The job then goes back to its
// flow, which the scheduler holds until the pause's end.
func (l *leader) keyHeld(f *flow, j pendingJob, start time.Time) bool {
	if l.keys == nil {
		return false
	}
	token := queue.SubjectToken(f.subject)
	until := l.keys.Until(token)
	if !until.After(start) {
		return false
	}
	now := time.Now().UnixNano()
	l.sched.putBack(f.subject, j, now)
	l.sched.hold(token, until.UnixNano(), now)
	return true
}

// keyPaused hands the grant msg of a job on subject back when its key is
// paused: its start came inside the pause (a pushback after its booking).
// It goes back until the pause's end, when a worker books it a new start.
func (d *drainer) keyPaused(msg jetstream.Msg, subject string) bool {
	if d.keyPauses == nil {
		return false
	}
	wait := time.Until(d.keyPauses.Until(queue.SubjectToken(subject)))
	if wait <= 0 {
		return false
	}
	d.handBack(msg, wait, nil)
	return true
}

// yieldKey pauses the key of the job of e, whose downstream pushed back,
// on every worker; with an adaptive leak it cuts the key's own rate too.
func (r *runner) yieldKey(e *execution, after time.Duration) {
	if e.job == nil {
		return
	}
	ctx, cancel := settleCtx(context.Background())
	defer cancel()
	token := queue.KeyToken(e.job.Key)
	var err error
	if maxRate, adaptive := leakOf(r.cfg); adaptive {
		_, err = r.keyPauses.PauseCut(ctx, r.keyPauseKV, r.cfg.Queue.Name, token, after, maxRate)
	} else {
		_, err = r.keyPauses.Pause(ctx, r.keyPauseKV, r.cfg.Queue.Name, token, after)
	}
	if err != nil {
		r.log.Warn("the downstream pushed back but pausing the job's key failed; the key runs on", "job", e.job.ID, "error", err)
	}
}

// leakOf is the leak's maximum rate and whether it is adaptive, as the
// pacer has them now (a reload changes them in place,
// pace.YieldingPacer.Leak), else as the queue's configuration says.
func leakOf(cfg WorkerConfig) (bucket.Rate, bool) {
	if p, ok := cfg.Pacer.(interface{ Leak() (bucket.Rate, bool) }); ok {
		return p.Leak()
	}
	return cfg.Queue.LeakRate, cfg.Queue.Adaptive
}
