package admit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestSubmitVerdicts(t *testing.T) {
	t.Parallel()
	// Rate 1/m, burst 2, delay 1: a key's first two jobs start now, the
	// third is queued a minute out, the fourth rejected.
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2, delay: 1}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	var got []admit.Answer
	for range 4 {
		got = append(got, submit(t, a, request("q", "c")))
	}
	for i, want := range []spillway.Status{spillway.Admitted, spillway.Admitted, spillway.Queued, spillway.Rejected} {
		if got[i].Reply.Status != want || got[i].Reply.Queue != "q" || got[i].Source != admit.FromPrimary {
			t.Fatalf("job %d: %+v (source %d), want %s from the primary store", i+1, got[i].Reply, got[i].Source, want)
		}
	}
	for i, ans := range got[:3] {
		if ans.Reply.ID == "" || ans.Reply.Duplicate {
			t.Errorf("job %d: %+v, want a new id", i+1, ans.Reply)
		}
	}
	q := got[2]
	if q.Reply.NotBefore == nil || !q.Reply.NotBefore.Equal(q.Decision.NotBefore) || q.Decision.NotBefore.Sub(q.Decision.At) <= 0 {
		t.Errorf("queued job: not_before %v, decision %+v; want the decision's not-before, after its time", q.Reply.NotBefore, q.Decision)
	}
	if q.Reply.Position < 1 || q.Reply.EstimatedStart == nil || q.Reply.EstimatedStart.Before(*q.Reply.NotBefore) {
		t.Errorf("queued job: position %d, estimated start %v; want ≥ 1 and not before %v", q.Reply.Position, q.Reply.EstimatedStart, q.Reply.NotBefore)
	}
	r := got[3]
	if r.Reply.ID != "" || r.Reply.Type != spillway.ProblemRateLimited || r.Reply.RetryAfterMS <= 0 || r.Reply.RetryAfterMS > 60_000 {
		t.Errorf("rejected job: %+v, want no id, %s and 0 < retry_after_ms ≤ 60000", r.Reply, spillway.ProblemRateLimited)
	}
	if want := (r.Decision.RetryAfter + time.Millisecond - 1) / time.Millisecond; r.Reply.RetryAfterMS != int64(want) {
		t.Errorf("retry_after_ms %d, want the decision's %v rounded up to %d", r.Reply.RetryAfterMS, r.Decision.RetryAfter, want)
	}
	if n, m := b.msgs(t, "q", queue.Ready), b.msgs(t, "q", queue.Backlog); n != 2 || m != 1 {
		t.Errorf("READY holds %d jobs, the backlog %d; want 2 and 1", n, m)
	}
}

// TestSubmitBadRequests: what a submission gets for what cannot be decided.
func TestSubmitBadRequests(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: leaky
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 2, nodelay: true}
    backlog: {capacity: 10, leak_rate: 1/s}
  - name: tokens
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 5}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	long := strings.Repeat("k", admit.MaxKeyLen+1)
	for _, c := range []struct {
		name string
		r    *admit.Request
		want string
	}{
		{"unknown queue", request("nope", "c"), spillway.ProblemNotFound},
		{"cost -1", withCost(request("leaky", "c"), -1), spillway.ProblemBadCost},
		{"key over MaxKeyLen", request("leaky", long), spillway.ProblemBadKey},
		{"idempotency key too long", withIdem(request("leaky", "c"), strings.Repeat("i", admit.MaxIdempotencyKeyLen+1)), spillway.ProblemBadRequest},
		// More than the limit can ever grant: burst+1 for a leaky bucket,
		// the burst for a token bucket. No wait would help, so this is
		// the cost's fault (spillway.ProblemBadCost), not a 429 without an
		// honest Retry-After — nor a job queued that no tier could take.
		{"cost over a leaky bucket's burst+1", withCost(request("leaky", "c"), 4), spillway.ProblemBadCost},
		{"cost over a token bucket's burst", withCost(request("tokens", "c"), 6), spillway.ProblemBadCost},
	} {
		ans, err := a.Submit(context.Background(), c.r)
		var e *admit.Error
		if !errors.As(err, &e) || e.Type != c.want {
			t.Errorf("%s: answer %+v, err %v; want an *admit.Error of type %s", c.name, ans.Reply, err, c.want)
		}
	}
	// At the bounds, accepted.
	for _, r := range []*admit.Request{
		request("leaky", strings.Repeat("k", admit.MaxKeyLen)),
		withIdem(request("leaky", "d"), strings.Repeat("i", admit.MaxIdempotencyKeyLen)),
		withCost(request("leaky", "e"), 3),
		withCost(request("tokens", "e"), 5),
	} {
		if ans := submit(t, a, r); ans.Reply.Status != spillway.Admitted {
			t.Errorf("%s at the bounds: %+v, want admitted", r.Queue, ans.Reply)
		}
	}
	if n := b.msgs(t, "leaky", queue.Backlog) + b.msgs(t, "tokens", queue.Backlog); n != 0 {
		t.Errorf("the backlogs hold %d jobs after bad requests, want none", n)
	}
}

func withCost(r *admit.Request, n int64) *admit.Request  { r.Cost = n; return r }
func withIdem(r *admit.Request, k string) *admit.Request { r.IdempotencyKey = k; return r }

// sameDecision reports how got differs from want, or "".
func sameDecision(got, want bucket.Decision) string {
	if got.Verdict != want.Verdict || !got.At.Equal(want.At) || !got.NotBefore.Equal(want.NotBefore) || got.Tier != want.Tier ||
		got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter || got.Consumed != want.Consumed {
		return fmt.Sprintf("\n got %+v\nwant %+v", got, want)
	}
	return ""
}

// replay decides, in a new memory store, a job at each of at (the jobs a
// key kept), then one at last, and returns that last decision: what the
// store under test should say if nothing else ever happened to the key.
func replay(t *testing.T, limits []bucket.Limit, at []time.Time, last time.Time) bucket.Decision {
	t.Helper()
	var now time.Time
	m, err := bucket.NewMemory(bucket.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	tiers := make([]bucket.Tier, len(limits))
	for i, l := range limits {
		tiers[i] = bucket.Tier{Key: fmt.Sprint(i), Limit: l}
	}
	for _, now = range at {
		if _, err := m.Decide(t.Context(), "ref", tiers, 1); err != nil {
			t.Fatal(err)
		}
	}
	now = last
	d, err := m.Decide(t.Context(), "ref", tiers, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRefundOnBacklogFull: a job the backlog refuses takes nothing from
// its tiers (docs/design.md#algorithms): the next decision for its key is, to the
// nanosecond, what it would be had the refused job never come.
func TestRefundOnBacklogFull(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			o := setupOptions{}
			if store == "redis" {
				_, o.primary = redisStore(t)
			}
			// The leaky tier queues every job after a key's first (delay
			// 0); the backlog takes 3 jobs, 2 of one key; nothing drains.
			a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 10}
    backlog: {capacity: 3, per_key_capacity: 2, leak_rate: 1/s}
`, o)
			limits := []bucket.Limit{b.Config.Queues[0].Limits[0].Limit}
			// firstDue is when the first job queued (a's second) is due:
			// the first place, of the queue and of key a, to free.
			var firstDue time.Time
			check := func(key string, want []spillway.Status, refusal string) {
				t.Helper()
				var kept []time.Time
				for i, w := range want {
					ans := submit(t, a, request("q", key))
					answered := time.Now()
					if ans.Reply.Status != w {
						t.Fatalf("%s job %d: %+v, want %s", key, i+1, ans.Reply, w)
					}
					if w == spillway.Queued && firstDue.IsZero() {
						firstDue = *ans.Reply.NotBefore
					}
					if w != spillway.Rejected {
						kept = append(kept, ans.Decision.At)
						continue
					}
					// Honest: not before the first queued job is due,
					// at most a slot (1s) and 1s after.
					wait := firstDue.Sub(answered)
					if got := time.Duration(ans.Reply.RetryAfterMS) * time.Millisecond; ans.Reply.Type != refusal || got < wait || got > wait+2*time.Second {
						t.Errorf("%s job %d: %+v, want %s with retry_after_ms from %v to %v later (when the first queued job is due)", key, i+1, ans.Reply, refusal, wait, wait+2*time.Second)
					}
					if ans.Decision.Verdict != bucket.Queued {
						t.Fatalf("%s job %d: the tiers said %v, want queued (refused by the backlog)", key, i+1, ans.Decision.Verdict)
					}
					if diff := sameDecision(ans.Decision, replay(t, limits, kept, ans.Decision.At)); diff != "" {
						t.Errorf("%s job %d, refused by the backlog, was not decided as if the earlier refused jobs never came:%s", key, i+1, diff)
					}
					if len(kept) < i {
						// Had the earlier refused job kept its units, this
						// decision would differ: the check can tell.
						withRefused := replay(t, limits, append(kept[:len(kept):len(kept)], kept[len(kept)-1]), ans.Decision.At)
						if sameDecision(ans.Decision, withRefused) == "" {
							t.Fatalf("%s job %d: the check cannot tell a refunded job from a kept one", key, i+1)
						}
					}
				}
			}
			check("a", []spillway.Status{spillway.Admitted, spillway.Queued, spillway.Queued, spillway.Rejected, spillway.Rejected}, spillway.ProblemKeyFull)
			check("b", []spillway.Status{spillway.Admitted, spillway.Queued, spillway.Rejected, spillway.Rejected}, spillway.ProblemQueueFull)
			if n := b.msgs(t, "q", queue.Backlog); n != 3 {
				t.Errorf("the backlog holds %d jobs, want its capacity, 3", n)
			}
		})
	}
}

// TestRefundExcessTiers: a token bucket's excess takes nothing from it,
// but the other tiers took the job's units; when the backlog refuses the
// job they give them back.
func TestRefundExcessTiers(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 10, nodelay: true}
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 1, leak_rate: 1/s}
`, setupOptions{})
	limits := []bucket.Limit{b.Config.Queues[0].Limits[0].Limit, b.Config.Queues[0].Limits[1].Limit}
	var kept []time.Time
	for i, want := range []spillway.Status{spillway.Admitted, spillway.Queued, spillway.Rejected, spillway.Rejected} {
		ans := submit(t, a, request("q", "c"))
		if ans.Reply.Status != want {
			t.Fatalf("job %d: %+v, want %s", i+1, ans.Reply, want)
		}
		if want != spillway.Rejected {
			kept = append(kept, ans.Decision.At)
			continue
		}
		if ans.Reply.Type != spillway.ProblemQueueFull || ans.Decision.Verdict != bucket.Excess || ans.Decision.Consumed != 1 {
			t.Fatalf("job %d: %+v, decision %+v; want queue-full, the token tier's excess, the leaky tier consumed", i+1, ans.Reply, ans.Decision)
		}
		if diff := sameDecision(ans.Decision, replay(t, limits, kept, ans.Decision.At)); diff != "" {
			t.Errorf("job %d was not decided as if the refused job before it never came:%s", i+1, diff)
		}
	}
}
