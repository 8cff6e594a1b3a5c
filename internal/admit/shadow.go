package admit

import (
	"context"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Shadow tiers (docs/design.md#shadow-tiers) are decided for every job
// the enforcing tiers took, and never refuse, queue or delay it.
//
// Each one is decided on its own, after the enforcing tiers and after
// the job is stored, in the same store, at the same bucket key (its
// place in the queue's limits) and for the same cost as if it enforced.
// Its state therefore moves as an enforcing tier's would: a job it
// would admit or queue takes its units, one it would refuse takes none,
// so its next decision is the one enforcing would give. A job the
// enforcing tiers or the backlog refused is refused whatever a shadow
// tier says, and takes nothing from it: no shadow tier decides it.
//
// Deciding them apart (one store round trip each) rather than in the
// enforcing tiers' all-or-nothing decision is what keeps a shadow
// tier's refusal from refusing the job, its not-before from delaying
// it, and each shadow tier's verdict its own.

// ShadowDecision is what one shadow tier would have done with a job.
type ShadowDecision struct {
	// Tier is the tier's name (its file name, or tier<i>).
	Tier string
	// Verdict is spillway.ShadowAdmitted, spillway.ShadowWouldQueue (a leaky
	// tier's queued, or another algorithm's excess: the backlog's room
	// is not asked) or spillway.ShadowWouldReject (also for a request the
	// tier could not key or whose cost it never grants, which enforcing
	// would answer 400).
	Verdict string
}

// ShadowHeader is the Spillway-Shadow header's values for the answer:
// "<tier> <verdict>" for each shadow tier that would not have admitted
// the job.
func (a Answer) ShadowHeader() []string {
	var vs []string
	for _, s := range a.Shadow {
		if s.Verdict != spillway.ShadowAdmitted {
			vs = append(vs, s.Tier+" "+s.Verdict)
		}
	}
	return vs
}

// enforcing is q as its enforcing tiers see it: q itself when it has no
// shadow tier, else a copy whose Limits leave the shadow tiers out.
// Decisions, rate-limit headers and metrics of the job's verdict read it;
// bucket keys are still numbered by the full list (tiersFor).
func enforcing(q *config.Queue) *config.Queue {
	n := 0
	for _, l := range q.Limits {
		if l.Shadow() {
			n++
		}
	}
	if n == 0 {
		return q
	}
	e := *q
	e.Limits = make([]config.Limit, 0, len(q.Limits)-n)
	for _, l := range q.Limits {
		if !l.Shadow() {
			e.Limits = append(e.Limits, l)
		}
	}
	return &e
}

// decideShadow decides q's shadow tiers for a job answered ans (q with
// all its tiers), counts each decision and returns them; nil when q has
// none or the job was refused.
func (a *Admitter) decideShadow(ctx context.Context, q *config.Queue, r *Request, cost int64, ans Answer) []ShadowDecision {
	if ans.Reply.Status != spillway.Admitted && ans.Reply.Status != spillway.Queued {
		return nil
	}
	if ans.Source == FromOpen {
		// The shared store just failed and no store decides: asking it
		// again per shadow tier would only count more fallbacks.
		return nil
	}
	var out []ShadowDecision
	for i, l := range q.Limits {
		if !l.Shadow() {
			continue
		}
		v, ok := a.shadowVerdict(ctx, q, i, l, r, cost)
		if !ok {
			continue
		}
		out = append(out, ShadowDecision{Tier: l.Name, Verdict: v})
		a.observe(Event{Kind: ShadowDecided, Queue: q.Name, Tier: l.Name, Verdict: v})
	}
	return out
}

// shadowVerdict decides shadow tier i of q, l, as an enforcing tier of
// its own. ok is false when no store decided (the shared store failed
// and the failure mode is open or closed, or an error): then there is no
// verdict to give, and the job, already stored, is not touched.
func (a *Admitter) shadowVerdict(ctx context.Context, q *config.Queue, i int, l config.Limit, r *Request, cost int64) (string, bool) {
	k, err := clientKey(q, l, r)
	if err != nil {
		return spillway.ShadowWouldReject, true
	}
	t := tierOf(i, l, k)
	if cost > t.Limit.Quota() {
		return spillway.ShadowWouldReject, true
	}
	d, src, err := a.o.Store.DecideFrom(ctx, q.Name, []bucket.Tier{t}, cost)
	if err != nil || src == FromOpen || src == FromClosed {
		a.o.Logger.Debug("admit: a shadow tier was not decided", "queue", q.Name, "tier", l.Name, "err", err)
		return "", false
	}
	switch d.Verdict {
	case bucket.Admitted:
		return spillway.ShadowAdmitted, true
	case bucket.Rejected:
		return spillway.ShadowWouldReject, true
	default: // queued, excess
		return spillway.ShadowWouldQueue, true
	}
}
