package admit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// scheduled is request with a schedule.
func scheduled(q, client string, s admit.Schedule) *admit.Request {
	r := request(q, client)
	r.Schedule = s
	return r
}

// A scheduled job waits in the backlog until its time, even when the tiers
// would admit it, and takes its units at submission: the next job finds
// the token gone.
func TestScheduledJobQueuedTakingItsUnitAtSubmission(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 100, leak_rate: 10/s, max_delay: 1h}
`, setupOptions{})
	before := time.Now()
	first := submit(t, a, scheduled("q", "c", admit.Schedule{Delay: 5 * time.Second}))
	after := time.Now()
	if first.Reply.Status != spillway.Queued || first.Decision.Verdict != bucket.Admitted {
		t.Fatalf("scheduled job: %+v (tiers %s), want queued, the tiers admitting it", first.Reply, first.Decision.Verdict)
	}
	nb := first.Reply.NotBefore
	if nb == nil || nb.Before(before.Add(5*time.Second)) || nb.After(after.Add(5*time.Second)) {
		t.Errorf("not_before %v, want 5 s after the submission (%v to %v)", nb, before, after)
	}
	if est := first.Reply.EstimatedStart; est == nil || nb == nil || !est.Equal(*nb) {
		t.Errorf("estimated_start %v, want the not_before %v", est, nb)
	}
	if j, ok := backlogJobs(t, b, "q")[first.Reply.ID]; !ok || nb == nil || !j.NotBefore.Equal(*nb) {
		t.Errorf("stored in the backlog: %t, not-before %v, want %v", ok, j.NotBefore, nb)
	}
	if b.msgs(t, "q", queue.Ready) != 0 {
		t.Error("the scheduled job is in READY")
	}
	second := submit(t, a, request("q", "c"))
	if second.Decision.Verdict != bucket.Excess {
		t.Errorf("the next job: tiers say %s, want excess (the scheduled job took the token)", second.Decision.Verdict)
	}
	// A time in the past is no delay: the job is admitted as usual.
	past := submit(t, a, scheduled("q", "d", admit.Schedule{NotBefore: time.Now().Add(-time.Hour)}))
	if past.Reply.Status != spillway.Admitted {
		t.Errorf("a not-before in the past: %+v, want admitted", past.Reply)
	}
}

// A schedule beyond backlog.max_delay (or the queue's max_age) is a bad
// request naming the header, and takes nothing.
func TestScheduleBeyondMaxDelayRefused(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 100, leak_rate: 10/s, max_delay: 1h}
  - name: aged
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 100, leak_rate: 10/s, max_age: 10m}
`, setupOptions{})
	for _, c := range []struct {
		queue string
		s     admit.Schedule
		field string
		says  string
	}{
		{"q", admit.Schedule{Delay: 2 * time.Hour}, spillway.HeaderDelay, "max_delay"},
		{"q", admit.Schedule{NotBefore: time.Now().Add(61 * time.Minute)}, spillway.HeaderNotBefore, "max_delay"},
		{"aged", admit.Schedule{Delay: 11 * time.Minute}, spillway.HeaderDelay, "max_age"},
	} {
		_, err := a.Submit(context.Background(), scheduled(c.queue, "c", c.s))
		var e *admit.Error
		if !errors.As(err, &e) || e.Type != spillway.ProblemBadRequest || e.Field != c.field || !strings.Contains(e.Detail, c.says) {
			t.Errorf("%s %+v: %v, want bad-request naming %s and %s", c.queue, c.s, err, c.field, c.says)
		}
	}
	if got := submit(t, a, request("q", "c")); got.Reply.Status != spillway.Admitted {
		t.Errorf("after the refused ones: %+v, want admitted (nothing was taken)", got.Reply)
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 0 {
		t.Errorf("the backlog holds %d jobs", n)
	}
}

// A job that would start later than its Spillway-Max-Wait is refused at
// once with wait-too-long and a Retry-After of when it would fit, taking
// no unit (the shared store is a real Redis) and no backlog slot: the
// next job of the key gets what it would have had without it.
func TestMaxWaitRefusesTakingNothing(t *testing.T) {
	t.Parallel()
	_, store := redisStore(t)
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 10}
    backlog: {capacity: 100, leak_rate: 1/m}
`, setupOptions{primary: store, mode: config.FailClosed})
	first := submit(t, a, request("q", "c"))
	if first.Reply.Status != spillway.Admitted {
		t.Fatalf("first job: %+v", first.Reply)
	}
	wait := 10 * time.Second
	refused := submit(t, a, scheduled("q", "c", admit.Schedule{MaxWait: &wait}))
	if refused.Reply.Status != spillway.Rejected || refused.Reply.Type != spillway.ProblemWaitTooLong {
		t.Fatalf("a job queued for 60 s with max-wait 10 s: %+v, want rejected wait-too-long", refused.Reply)
	}
	// It would start 60 s after the first job: a retry fits 50 s from now.
	if ms := refused.Reply.RetryAfterMS; ms < 45_000 || ms > 50_000 {
		t.Errorf("retry_after_ms %d, want about 50 s", ms)
	}
	if refused.Refunded != 1 {
		t.Errorf("refunded %d units, want 1", refused.Refunded)
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 0 {
		t.Errorf("the backlog holds %d jobs, want none", n)
	}
	next := submit(t, a, request("q", "c"))
	if next.Reply.Status != spillway.Queued {
		t.Fatalf("next job: %+v, want queued", next.Reply)
	}
	// Without the refused job, the next one is the key's second: due 60 s
	// after the first, not 120 s.
	if d := next.Decision.NotBefore.Sub(first.Decision.At); d < 59*time.Second || d > 61*time.Second {
		t.Errorf("next job due %v after the first, want 60 s (the refused job took no unit)", d)
	}
	// A job that fits carries its expiry into the backlog.
	long := time.Hour
	fits := submit(t, a, scheduled("q", "c", admit.Schedule{MaxWait: &long}))
	if fits.Reply.Status != spillway.Queued {
		t.Fatalf("max-wait 1h: %+v, want queued", fits.Reply)
	}
	j := backlogJobs(t, b, "q")[fits.Reply.ID]
	if d := j.ExpiresAt.Sub(j.EnqueuedAt); d != time.Hour {
		t.Errorf("stored expiry %v after its enqueue (%v), want 1h", d, j.ExpiresAt)
	}
}

// A not-before later than the max-wait is refused before any tier is
// asked, with a Retry-After of when it would fit.
func TestMaxWaitBehindNotBefore(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 100, leak_rate: 10/s}
`, setupOptions{})
	wait := 10 * time.Second
	got := submit(t, a, scheduled("q", "c", admit.Schedule{NotBefore: time.Now().Add(time.Minute), MaxWait: &wait}))
	if got.Reply.Type != spillway.ProblemWaitTooLong {
		t.Fatalf("not-before in 60 s, max-wait 10 s: %+v, want wait-too-long", got.Reply)
	}
	if ms := got.Reply.RetryAfterMS; ms < 45_000 || ms > 50_000 {
		t.Errorf("retry_after_ms %d, want about 50 s", ms)
	}
	if next := submit(t, a, request("q", "c")); next.Reply.Status != spillway.Admitted {
		t.Errorf("the next job: %+v, want admitted (nothing taken)", next.Reply)
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 0 {
		t.Errorf("the backlog holds %d jobs", n)
	}
}

// The backlog's depth counts too: a job that the tiers leave to the
// backlog behind another one, at a leak of one a minute, would start a
// minute from now, and max-wait 10 s refuses it without a backlog slot.
func TestMaxWaitBehindTheBacklog(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 100, leak_rate: 1/m}
`, setupOptions{})
	if got := submit(t, a, request("q", "c")); got.Reply.Status != spillway.Admitted {
		t.Fatalf("first job: %+v", got.Reply)
	}
	ahead := submit(t, a, request("q", "c"))
	if ahead.Reply.Status != spillway.Queued || ahead.Reply.Position != 1 {
		t.Fatalf("second job: %+v, want queued first in the backlog", ahead.Reply)
	}
	wait := 10 * time.Second
	got := submit(t, a, scheduled("q", "d", admit.Schedule{MaxWait: &wait}))
	if got.Reply.Type != spillway.ProblemWaitTooLong {
		t.Fatalf("second in a backlog leaking 1/m, max-wait 10 s: %+v, want wait-too-long", got.Reply)
	}
	if ms := got.Reply.RetryAfterMS; ms < 45_000 || ms > 50_000 {
		t.Errorf("retry_after_ms %d, want about 50 s", ms)
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 1 {
		t.Errorf("the backlog holds %d jobs, want 1 (the refused job took no slot)", n)
	}
	long := time.Minute
	if fits := submit(t, a, scheduled("q", "d", admit.Schedule{MaxWait: &long})); fits.Reply.Status != spillway.Queued {
		t.Errorf("max-wait 1m: %+v, want queued", fits.Reply)
	}
}
