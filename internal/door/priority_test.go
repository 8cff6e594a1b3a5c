package door_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// priorityConfig: every key's first job is admitted (READY), the next
// ones queued; tenant-a weighs 4.
const priorityConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, delay: 0}
    backlog: {capacity: 10, leak_rate: 1/m, fairness: {weights: {tenant-a: 4}}}
`

// priorityCases are Spillway-Priority values a door takes, spelt as a
// client may, and the class each is ("" absent).
var priorityCases = []struct {
	header string
	want   spillway.Priority
}{
	{"high", spillway.High},
	{"LOW", spillway.Low},
	{" normal ", spillway.Normal},
	{"", spillway.Normal},
}

func TestHTTPPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, priorityConfig, setupOptions{})
	for i, c := range priorityCases {
		key := "tenant-" + string(rune('a'+i))
		var header []string
		if c.header != "" {
			header = []string{spillway.HeaderPriority, c.header}
		}
		r := b.post(t, "q", []byte("x"), append(header, "X-Client", key)...)
		if r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
			t.Fatalf("%s %q: %d %s, want 202 admitted", spillway.HeaderPriority, c.header, r.code, r.body)
		}
		if r.header.Get("RateLimit") == "" {
			t.Errorf("%s %q: no RateLimit header", spillway.HeaderPriority, c.header)
		}
		j, ok := b.jobOfKey(t, "q", queue.Ready, key)
		wantWeight := 0
		if key == "tenant-a" {
			wantWeight = 4
		}
		if !ok || j.ID != r.reply.ID || j.Priority != c.want || j.Weight != wantWeight {
			t.Errorf("%s %q: the stored job %+v (found %v), want priority %s, weight %d", spillway.HeaderPriority, c.header, j, ok, c.want, wantWeight)
		}
	}
	// Queued: the class travels to the backlog too.
	r := b.post(t, "q", nil, spillway.HeaderPriority, "low", "X-Client", "tenant-a")
	if r.code != http.StatusAccepted || r.reply.Status != spillway.Queued {
		t.Fatalf("tenant-a's second job: %d %s, want 202 queued", r.code, r.body)
	}
	if j, ok := b.jobOfKey(t, "q", queue.Backlog, "tenant-a"); !ok || j.ID != r.reply.ID || j.Priority != spillway.Low || j.Weight != 4 {
		t.Errorf("the queued job %+v (found %v), want priority low, weight 4", j, ok)
	}
}

func TestHTTPBadPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, priorityConfig, setupOptions{})
	for _, v := range []string{"urgent", "1", "high,low", strings.Repeat("h", 100)} {
		r := b.post(t, "q", []byte("x"), spillway.HeaderPriority, v, "X-Client", "c")
		if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadPriority || r.problem.Field != spillway.HeaderPriority ||
			!strings.Contains(r.problem.Detail, spillway.HeaderPriority) || !strings.Contains(r.problem.Detail, "high, normal or low") {
			t.Errorf("%s %.20q: %d %s, want 400 %s naming the header and the classes", spillway.HeaderPriority, v, r.code, r.body, spillway.ProblemBadPriority)
		}
		if r.header.Get("RateLimit") != "" || r.header.Get("Retry-After") != "" {
			t.Errorf("%s %.20q: rate-limit headers on a 400: %v", spillway.HeaderPriority, v, r.header)
		}
	}
	if r := b.post(t, "q", nil, "X-Client", "c"); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
		t.Errorf("after the refused ones: %d %s, want admitted (no unit taken)", r.code, r.body)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 1 {
		t.Errorf("%d jobs stored, want 1", n)
	}
}

func TestNATSPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, priorityConfig, setupOptions{})
	nc := b.nats.Connect(t)
	for i, c := range priorityCases {
		key := "tenant-" + string(rune('a'+i))
		header := []string{"X-Client", key}
		if c.header != "" {
			header = append(header, "spillway-priority", c.header) // any case
		}
		rep := ask(t, nc, natsMsg("q", nil, header...))
		if rep.Status != spillway.Admitted {
			t.Fatalf("%s %q: %+v, want admitted", spillway.HeaderPriority, c.header, rep)
		}
		if j, ok := b.jobOfKey(t, "q", queue.Ready, key); !ok || j.ID != rep.ID || j.Priority != c.want {
			t.Errorf("%s %q: the stored job %+v (found %v), want priority %s", spillway.HeaderPriority, c.header, j, ok, c.want)
		}
	}
	rep := ask(t, nc, natsMsg("q", nil, "X-Client", "tenant-a", spillway.HeaderPriority, "high"))
	if j, ok := b.jobOfKey(t, "q", queue.Backlog, "tenant-a"); rep.Status != spillway.Queued || !ok || j.ID != rep.ID || j.Priority != spillway.High || j.Weight != 4 {
		t.Errorf("tenant-a's second job: %+v, stored %+v (found %v); want queued, priority high, weight 4", rep, j, ok)
	}
	for _, v := range []string{"urgent", "0"} {
		rep := ask(t, nc, natsMsg("q", nil, "X-Client", "c", spillway.HeaderPriority, v))
		if rep.Status != spillway.Failed || rep.Type != spillway.ProblemBadPriority || !strings.Contains(rep.Error, spillway.HeaderPriority) || !strings.Contains(rep.Error, "high, normal or low") {
			t.Errorf("%s %q: %+v, want an error %s naming the header and the classes", spillway.HeaderPriority, v, rep, spillway.ProblemBadPriority)
		}
	}
	if rep := ask(t, nc, natsMsg("q", nil, "X-Client", "c")); rep.Status != spillway.Admitted {
		t.Errorf("after the refused ones: %+v, want admitted (no unit taken)", rep)
	}
}
