package admit

import (
	"context"
	"fmt"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Schedule is a submission's timing (docs/design.md#scheduled-jobs), as
// the doors read it from Spillway-Not-Before, Spillway-Delay and
// Spillway-Max-Wait: at most one of NotBefore and Delay, no negative
// duration, and no delay longer than the max-wait. Bounds that depend on
// the queue (backlog.max_delay, backlog.max_age) are Submit's.
type Schedule struct {
	// NotBefore (Spillway-Not-Before) or Delay (Spillway-Delay, from the
	// submission) is the earliest the job may start; zero: at once. A
	// time in the past is no delay.
	NotBefore time.Time
	Delay     time.Duration
	// MaxWait (Spillway-Max-Wait), if set, is how long after its
	// submission the job may still start: one that would start later is
	// refused (wait-too-long), and one queued expires then.
	MaxWait *time.Duration
	// Debounce (Spillway-Debounce), if set, is a delay from the
	// submission, as Delay, after which the job starts unless a newer job
	// of its debounce key superseded it (debounce.go). Not with NotBefore
	// or Delay.
	Debounce time.Duration
}

// start is when a schedule lets a job start, submitted at now (zero: at
// once); a time beyond the queue's max_delay, or its max_age (the job
// would be dead-lettered before it is due), is a bad request naming the
// header.
func (s Schedule) start(q *config.Queue, now time.Time) (time.Time, error) {
	at, header := s.NotBefore, spillway.HeaderNotBefore
	if s.Delay > 0 {
		at, header = now.Add(s.Delay), spillway.HeaderDelay
	}
	if s.Debounce > 0 {
		at, header = now.Add(s.Debounce), spillway.HeaderDebounce
	}
	ahead := at.Sub(now)
	if ahead <= 0 {
		return time.Time{}, nil
	}
	if ahead > q.Backlog.MaxDelay {
		return time.Time{}, &Error{Type: spillway.ProblemBadRequest, Field: header,
			Detail: fmt.Sprintf("%s schedules the job %s ahead: queue %s takes at most its backlog.max_delay, %s", header, ahead.Round(time.Millisecond), q.Name, q.Backlog.MaxDelay)}
	}
	if q.Backlog.MaxAge > 0 && ahead > q.Backlog.MaxAge {
		return time.Time{}, &Error{Type: spillway.ProblemBadRequest, Field: header,
			Detail: fmt.Sprintf("%s schedules the job %s ahead: queue %s dead-letters backlog jobs older than its backlog.max_age, %s", header, ahead.Round(time.Millisecond), q.Name, q.Backlog.MaxAge)}
	}
	return at, nil
}

// tooLate reports how much later than its max-wait a job submitted at now
// would start at start (≤ 0: in time, or no max-wait).
func (s Schedule) tooLate(now, start time.Time) time.Duration {
	if s.MaxWait == nil || !start.After(now) {
		return 0
	}
	return start.Sub(now) - *s.MaxWait
}

// waitTooLong is the answer to a job that would start too late: rejected
// with a Retry-After of when, if nothing else arrived, it would fit.
func waitTooLong(ans Answer, q string, late time.Duration) Answer {
	ans.Reply.Queue = q
	ans.Reply.Status = spillway.Rejected
	ans.Reply.Type = spillway.ProblemWaitTooLong
	ans.Reply.RetryAfterMS = retryAfterMS(late)
	return ans
}

// backlogStart estimates when a job not yet stored would start in q's
// backlog: the estimated start its queued answer would give, for the
// place after the backlog's last job (one stream info, read fresh, only
// for submissions with a max-wait). If the backlog cannot be read it
// answers notBefore: the job's expiry still keeps it from starting late.
func (a *Admitter) backlogStart(ctx context.Context, q *config.Queue, notBefore, now time.Time) time.Time {
	pos := int64(1)
	s, err := a.o.JS.Stream(ctx, queue.StreamName(q.Name, queue.Backlog))
	if err != nil {
		a.o.Logger.Warn("admit: could not read the backlog to estimate a job's start for its max-wait; its expiry still applies",
			"queue", q.Name, "err", err)
	} else if st := s.CachedInfo().State; st.Msgs > 0 {
		pos = int64(st.LastSeq-st.FirstSeq) + 2
	}
	return estimatedStart(now, notBefore, pos, q.Backlog.LeakRate)
}

// refuseLate gives back the units the tiers took for a job that would
// start after its max-wait, and answers wait-too-long.
func (a *Admitter) refuseLate(ctx context.Context, ans Answer, q *config.Queue, cost int64, late time.Duration) Answer {
	d := ans.Decision
	a.refund(ctx, q.Name, d)
	if d.Consumed&(1<<d.Tier) != 0 {
		ans.Refunded = cost
	}
	return waitTooLong(ans, q.Name, late)
}

// backlogStartIf is backlogStart for a schedule with a max-wait, and
// notBefore (no read) for one without.
func (a *Admitter) backlogStartIf(ctx context.Context, q *config.Queue, s Schedule, notBefore, now time.Time) time.Time {
	if s.MaxWait == nil {
		return notBefore
	}
	return a.backlogStart(ctx, q, notBefore, now)
}

// expiresAt is when a job submitted at now with schedule s expires in the
// backlog (zero: never).
func expiresAt(s Schedule, now time.Time) time.Time {
	if s.MaxWait == nil {
		return time.Time{}
	}
	return now.Add(*s.MaxWait)
}
