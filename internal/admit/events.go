package admit

import (
	"fmt"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The admitter reports what it does as Events to Options.Observe, as
// pkg/queue's workers report a job's steps: it imports no metrics
// library, and whoever runs it turns the events into metrics (admitterd
// into Prometheus series, docs/design.md#metrics). Store errors and
// failure-mode decisions are reported by Failover's OnError and
// OnFallback.

// EventKind is what an Event reports.
type EventKind uint8

const (
	// Decided: a submission was answered (Queue, Verdict, Reason, Took).
	// Verdict is the answer's status (admitted, queued, rejected), or
	// duplicate for a repeated idempotency key, or error for a
	// submission that failed after its queue was found; Reason says why
	// (Submit's reasons: limit, excess, backlog_full, ...). Requests that
	// could not be decided at all (an unknown queue, a bad cost or key)
	// are not reported.
	Decided EventKind = iota
	// ShadowDecided: a shadow tier decided a job the enforcing tiers took
	// (Queue, Tier, Verdict: spillway.ShadowAdmitted, ShadowWouldQueue or
	// ShadowWouldReject).
	ShadowDecided
	// RetryAfterFallback: a full backlog's Retry-After could not be read
	// from the backlog and is the time to drain a whole backlog (Queue).
	RetryAfterFallback
	// JobSuperseded: a debounced job was superseded by a newer job of its
	// debounce key (Queue) and will not run (debounce.go).
	JobSuperseded
)

var eventNames = [...]string{"decided", "shadow_decided", "retry_after_fallback", "job_superseded"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one thing the admitter did. Fields a Kind does not name are
// zero.
type Event struct {
	Kind  EventKind
	Queue string
	// Verdict is the decision's (Decided) or the shadow tier's
	// (ShadowDecided).
	Verdict string
	// Reason is why (Decided).
	Reason string
	// Took is the time from the submission's arrival to its answer, the
	// job stored (Decided).
	Took time.Duration
	// Tier is the shadow tier's name (ShadowDecided).
	Tier string
}

// observe reports e if the admitter has an observer.
func (a *Admitter) observe(e Event) {
	if a.o.Observe != nil {
		a.o.Observe(e)
	}
}

// decided reports a Decided event.
func (a *Admitter) decided(q, verdict, reason string, took time.Duration) {
	a.observe(Event{Kind: Decided, Queue: q, Verdict: verdict, Reason: reason, Took: took})
}

// Series are the label values of the events a queue's configuration can
// give, for an observer that starts its series at 0 before the first
// event (so that rate() and alert rules see 0 rather than nothing).
type Series struct {
	// Decisions are the (verdict, reason) pairs of Decided events:
	// every queue's, excess when an enforcing tier's algorithm has one,
	// key_backlog_full with a per-key bound, and those of the failure
	// mode with a shared store. Errors other than unavailable and
	// internal (ours, which an alert watches) are the clients' and start
	// at their first.
	Decisions [][2]string
	// Shadow are the (tier, verdict) pairs of ShadowDecided events: each
	// shadow tier with every verdict.
	Shadow [][2]string
}

// QueueSeries returns the series queue q of cfg can give.
func QueueSeries(cfg *config.Config, q *config.Queue) Series {
	s := Series{Decisions: [][2]string{
		{"admitted", "limit"}, {"queued", "limit"}, {"rejected", "limit"}, {"rejected", "backlog_full"},
		{"duplicate", "idempotency"}, {"error", "unavailable"}, {"error", "internal"},
	}}
	for _, l := range enforcing(q).Limits {
		if l.Limit.Algorithm() != bucket.LeakyBucket {
			s.Decisions = append(s.Decisions, [2]string{"queued", "excess"})
			break
		}
	}
	if q.Backlog.PerKeyCapacity > 0 {
		s.Decisions = append(s.Decisions, [2]string{"rejected", "key_backlog_full"})
	}
	if cfg.Redis.Shared() {
		switch cfg.Redis.FailureMode {
		case config.FailOpen, "":
			s.Decisions = append(s.Decisions, [2]string{"admitted", "failure_mode_open"})
		case config.FailLocal:
			s.Decisions = append(s.Decisions, [2]string{"admitted", "limit_local"}, [2]string{"queued", "limit_local"}, [2]string{"rejected", "limit_local"})
		}
	}
	for _, l := range q.Limits {
		if l.Shadow() {
			for _, v := range []string{spillway.ShadowAdmitted, spillway.ShadowWouldQueue, spillway.ShadowWouldReject} {
				s.Shadow = append(s.Shadow, [2]string{l.Name, v})
			}
		}
	}
	return s
}
