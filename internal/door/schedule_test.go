package door_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const scheduleConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 10}
    backlog: {capacity: 100, leak_rate: 1/m, max_delay: 1h}
`

// The timing headers on the HTTP door: a delay queues the job for its
// time; a schedule beyond max_delay, both start headers, or a malformed
// one is 400 naming the header; a job that would start after its
// max-wait is 429 wait-too-long with Retry-After, taking nothing.
func TestHTTPSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, scheduleConfig, setupOptions{})
	before := time.Now()
	r := b.post(t, "q", nil, "X-Client", "a", spillway.HeaderDelay, "5s")
	if r.code != http.StatusAccepted || r.reply.Status != spillway.Queued || r.reply.NotBefore == nil || r.reply.NotBefore.Before(before.Add(5*time.Second)) {
		t.Fatalf("%s 5s: %d %s, want 202 queued, not before 5 s from now", spillway.HeaderDelay, r.code, r.body)
	}
	if j, ok := b.jobOfKey(t, "q", queue.Backlog, "a"); !ok || !j.NotBefore.Equal(*r.reply.NotBefore) {
		t.Errorf("the stored job %+v (found %v), want not-before %v", j, ok, r.reply.NotBefore)
	}
	for _, c := range []struct {
		header []string
		field  string
	}{
		{[]string{spillway.HeaderDelay, "2h"}, spillway.HeaderDelay},
		{[]string{spillway.HeaderNotBefore, time.Now().Add(2 * time.Hour).Format(time.RFC3339)}, spillway.HeaderNotBefore},
		{[]string{spillway.HeaderNotBefore, time.Now().Format(time.RFC3339), spillway.HeaderDelay, "1s"}, spillway.HeaderDelay},
		{[]string{spillway.HeaderMaxWait, "a while"}, spillway.HeaderMaxWait},
	} {
		r := b.post(t, "q", nil, append([]string{"X-Client", "b"}, c.header...)...)
		if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadRequest || r.problem.Field != c.field || !strings.Contains(r.problem.Detail, c.field) {
			t.Errorf("%v: %d %s, want 400 bad-request naming %s", c.header, r.code, r.body, c.field)
		}
	}
	// Key b's second job would wait 60 s for its tier.
	if r := b.post(t, "q", nil, "X-Client", "b"); r.reply.Status != spillway.Admitted {
		t.Fatalf("key b's first job: %d %s", r.code, r.body)
	}
	r = b.post(t, "q", nil, "X-Client", "b", spillway.HeaderMaxWait, "10s")
	if r.code != http.StatusTooManyRequests || r.problem.Type != spillway.ProblemWaitTooLong || r.header.Get(spillway.HeaderStatus) != string(spillway.Rejected) {
		t.Fatalf("max-wait 10 s, 60 s away: %d %s, want 429 %s", r.code, r.body, spillway.ProblemWaitTooLong)
	}
	if ra := r.header.Get("Retry-After"); ra != "50" && ra != "49" {
		t.Errorf("Retry-After %q, want 50 (60 s less the 10 s it may wait)", ra)
	}
	r = b.post(t, "q", nil, "X-Client", "b")
	if r.reply.Status != spillway.Queued || r.reply.NotBefore == nil || r.reply.NotBefore.After(time.Now().Add(61*time.Second)) {
		t.Errorf("key b's next job: %d %s, want queued about 60 s ahead (the refused job took no unit)", r.code, r.body)
	}
}

// The same headers on the NATS door, in any case.
func TestNATSSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, scheduleConfig, setupOptions{})
	nc := b.nats.Connect(t)
	rep := ask(t, nc, natsMsg("q", nil, "X-Client", "a", "spillway-delay", "5s"))
	if rep.Status != spillway.Queued || rep.NotBefore == nil {
		t.Fatalf("%s 5s: %+v, want queued with a not-before", spillway.HeaderDelay, rep)
	}
	rep = ask(t, nc, natsMsg("q", nil, "X-Client", "b", spillway.HeaderDelay, "2h"))
	if rep.Status != spillway.Failed || rep.Type != spillway.ProblemBadRequest || !strings.Contains(rep.Error, spillway.HeaderDelay) || !strings.Contains(rep.Error, "max_delay") {
		t.Errorf("%s 2h: %+v, want bad-request naming the header and max_delay", spillway.HeaderDelay, rep)
	}
	if rep := ask(t, nc, natsMsg("q", nil, "X-Client", "b")); rep.Status != spillway.Admitted {
		t.Fatalf("key b's first job: %+v", rep)
	}
	rep = ask(t, nc, natsMsg("q", nil, "X-Client", "b", "spillway-max-wait", "10s"))
	if rep.Status != spillway.Rejected || rep.Type != spillway.ProblemWaitTooLong || rep.RetryAfterMS < 45_000 || rep.RetryAfterMS > 50_000 {
		t.Errorf("max-wait 10 s, 60 s away: %+v, want rejected wait-too-long, retry after about 50 s", rep)
	}
}
