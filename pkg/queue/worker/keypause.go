package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// With pushback scope key (queue.PushbackKey), a handler's pushback pauses
// only its job's key (docs/design.md#pushback): the pause is shared state
// (pace.KeyPauses, followed by every worker), the leader holds the key's
// flows until its end (fairSched.hold) and grants no start inside it, and
// a worker whose granted start comes inside it hands the grant back until
// the pause's end.

// holdPausedKeys makes the scheduler ask the key pauses when it makes a
// flow, so that a flow made while its key is paused waits for the end.
func (l *leader) holdPausedKeys() {
	if l.keys == nil {
		return
	}
	l.sched.heldUntil = func(token string) int64 {
		if u := l.keys.Until(token); !u.IsZero() {
			return u.UnixNano()
		}
		return 0
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
// on every worker; an adaptive leak is cut as well (the queue's rate, the
// other keys' too), without a pause.
func (r *runner) yieldKey(e *execution, after time.Duration) {
	if e.job == nil {
		return
	}
	ctx, cancel := settleCtx(context.Background())
	defer cancel()
	token := queue.KeyToken(e.job.Key)
	if _, err := r.keyPauses.Pause(ctx, r.keyPauseKV, r.cfg.Queue.Name, token, after); err != nil {
		r.log.Warn("the downstream pushed back but pausing the job's key failed; the key runs on", "job", e.job.ID, "error", err)
	}
	if c, ok := r.cfg.Pacer.(cutter); ok {
		if err := c.Cut(ctx); err != nil {
			r.log.Warn("the downstream pushed back but cutting the adaptive leak failed", "error", err)
		}
	}
}

// cutter is a pace.Pacer whose adaptive leak a pushback can cut without a
// pause (pace.YieldingPacer.Cut).
type cutter interface {
	Cut(ctx context.Context) error
}
