package admit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const settleQueues = `
queues:
  - name: q
    limits:
      - {name: shadow, key: global, algorithm: fixed_window, limit: 1, window: 1h, mode: shadow}
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 100}
      - {key: global, algorithm: fixed_window, limit: 1000, window: 1h}
    backlog: {capacity: 10, leak_rate: 1/s}
`

// stampedJobs records the jobs an admitter stores.
type stampedJobs struct {
	mu   sync.Mutex
	jobs map[string]*queue.Job
}

func (s *stampedJobs) install(o *admit.Options) {
	s.jobs = map[string]*queue.Job{}
	o.OnStored = func(j *queue.Job, _ spillway.Status, _ queue.Stored) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.jobs[j.ID] = j
	}
}

func (s *stampedJobs) charge(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[id]; j != nil {
		return j.Header.Get(queue.HeaderCharge)
	}
	return ""
}

func costly(client string, cost int64) *admit.Request {
	r := request("q", client)
	r.Cost = cost
	return r
}

// A job's charge names the route and the tiers that took its units; a
// settle at a smaller actual cost gives the difference back at once, and a
// second settle of the same job changes nothing.
func TestSettleCostMemoryStore(t *testing.T) {
	t.Parallel()
	var stored stampedJobs
	a, _ := setup(t, settleQueues, setupOptions{options: func(o *admit.Options) {
		o.InstanceID = "a1"
		stored.install(o)
	}})
	ctx := context.Background()
	first := submit(t, a, costly("c", 100))
	if first.Reply.Status != spillway.Admitted {
		t.Fatalf("cost 100: %+v, want admitted", first.Reply)
	}
	charge := stored.charge(first.Reply.ID)
	parts := strings.Split(charge, ";")
	if len(parts) != 4 || parts[0] != "a1" || parts[2] != "100" || !strings.HasPrefix(parts[3], "1:") || !strings.Contains(parts[3], ",2:") {
		t.Fatalf("charge %q: want a1;<at>;100;1:<token>,2:<token> (the shadow tier 0 charges nothing)", charge)
	}
	got, err := a.SettleCost(ctx, "q", first.Reply.ID, charge, 10)
	if err != nil || got.Delta != -90 || got.Queue != "q" {
		t.Fatalf("settle at 10: %+v, %v; want 90 units given back", got, err)
	}
	if again, err := a.SettleCost(ctx, "q", first.Reply.ID, charge, 10); err != nil || again.Delta != 0 {
		t.Fatalf("the same settle again: %+v, %v; want nothing done", again, err)
	}
	if ans := submit(t, a, costly("c", 80)); ans.Reply.Status != spillway.Admitted {
		t.Fatalf("cost 80 after the settle: %+v, want admitted", ans.Reply)
	}
	// 10 tokens are left, not 100: the repeated settle gave nothing.
	if ans := submit(t, a, costly("c", 20)); ans.Reply.Status == spillway.Admitted {
		t.Fatalf("cost 20 with 10 tokens left: %+v, want it to wait", ans.Reply)
	}
	// A charge: the key owes 50 more; its next job waits.
	second := submit(t, a, costly("d", 50))
	if _, err := a.SettleCost(ctx, "q", second.Reply.ID, stored.charge(second.Reply.ID), 100); err != nil {
		t.Fatal(err)
	}
	if ans := submit(t, a, costly("d", 1)); ans.Reply.Status == spillway.Admitted {
		t.Fatalf("cost 1 after a settle took the whole burst: %+v, want it to wait", ans.Reply)
	}
}

// Bad settle requests are refused with ErrBadSettle and a message that
// names what is wrong; nothing is settled.
func TestSettleCostBadRequests(t *testing.T) {
	t.Parallel()
	var stored stampedJobs
	a, _ := setup(t, settleQueues, setupOptions{options: func(o *admit.Options) {
		o.InstanceID = "a1"
		stored.install(o)
	}})
	ans := submit(t, a, costly("c", 5))
	good := stored.charge(ans.Reply.ID)
	at := strings.Split(good, ";")[1]
	for _, c := range []struct {
		name, queue, id, charge string
		actual                  int64
		want                    string
	}{
		{"negative actual", "q", "j", good, -1, "actual cost -1"},
		{"huge actual", "q", "j", good, 1 << 40, "actual cost"},
		{"no job id", "q", "", good, 1, "job id"},
		{"no queue", "nope", "j", good, 1, "no queue"},
		{"malformed", "q", "j", "x", 1, "want <route>"},
		{"bad time", "q", "j", "a1;soon;5;1:x", 1, "decision time"},
		{"bad cost", "q", "j", "a1;" + at + ";0;1:x", 1, "cost"},
		{"other admitter", "q", "j", "a2;" + at + ";5;1:x", 1, "not this admitter's"},
		{"shared without a shared store", "q", "j", "shared;" + at + ";5;1:x", 1, "no shared store"},
		{"tier out of range", "q", "j", "a1;" + at + ";5;7:x", 1, "tier key"},
		{"shadow tier", "q", "j", "a1;" + at + ";5;0:x", 1, "shadow"},
		{"unknown override", "q", "j", "a1;" + at + ";5;1:x~00000000", 1, "no such override"},
		{"duplicate tier", "q", "j", "a1;" + at + ";5;1:x,1:x", 1, "share a key"},
		{"cost beyond the tier", "q", "j", "a1;" + at + ";500;1:x", 1, "never grants more than 100"},
	} {
		_, err := a.SettleCost(context.Background(), c.queue, c.id, c.charge, c.actual)
		if !errors.Is(err, admit.ErrBadSettle) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrBadSettle saying %q", c.name, err, c.want)
		}
	}
}

// With a shared store, the charge's route is "shared" and the record of
// settled jobs is in a KV bucket every admitter sees: a second admitter
// asked to settle the same job does nothing.
func TestSettleCostSharedStoreOnce(t *testing.T) {
	t.Parallel()
	_, store := redisStore(t)
	var stored stampedJobs
	var kv jetstream.KeyValue
	a, b := setup(t, settleQueues, setupOptions{primary: store, options: func(o *admit.Options) {
		stored.install(o)
	}})
	var err error
	if kv, err = b.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "settled-test"}); err != nil {
		t.Fatal(err)
	}
	opts := b.Options()
	opts.SettleKV = kv
	one, err := admit.New(b.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	two, err := admit.New(b.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ans := submit(t, a, costly("c", 100))
	charge := stored.charge(ans.Reply.ID)
	if !strings.HasPrefix(charge, admit.SettleShared+";") {
		t.Fatalf("charge %q: want the shared route", charge)
	}
	if got, err := one.SettleCost(context.Background(), "q", ans.Reply.ID, charge, 0); err != nil || got.Delta != -100 {
		t.Fatalf("first settle: %+v, %v; want 100 given back", got, err)
	}
	if got, err := two.SettleCost(context.Background(), "q", ans.Reply.ID, charge, 0); err != nil || got.Delta != 0 {
		t.Fatalf("the same job on another admitter: %+v, %v; want nothing done", got, err)
	}
	if ans := submit(t, a, costly("c", 100)); ans.Reply.Status != spillway.Admitted {
		t.Fatalf("cost 100 after the settle: %+v, want admitted", ans.Reply)
	}
	if ans := submit(t, a, costly("c", 1)); ans.Reply.Status == spillway.Admitted {
		t.Fatalf("cost 1 with no token left: %+v, want it to wait (the job was settled once)", ans.Reply)
	}
}

// ParseCharge never panics, and what it accepts it reads whole.
func FuzzParseCharge(f *testing.F) {
	for _, s := range []string{
		"shared;1764316800000000000;5;1:abc",
		"a1;1764316800000000000;100;1:abc,2:def~0a1b2c3d",
		"shared;1764316800000000000;5;1:abc@1764316800000000123,2:x",
		"", ";;;", "a;b;c;d", "shared;1;1;@", "shared;1;1;1:a@-5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := admit.ParseCharge(s)
		if err != nil {
			if !errors.Is(err, admit.ErrBadSettle) {
				t.Fatalf("%q: %v, not ErrBadSettle", s, err)
			}
			return
		}
		if c.Route == "" || c.Cost < 1 || len(c.Keys) == 0 || len(c.TierAt) != len(c.Keys) {
			t.Fatalf("%q: accepted as %+v", s, c)
		}
		for _, k := range c.Keys {
			if k == "" || strings.ContainsAny(k, ",;@") {
				t.Fatalf("%q: key %q", s, k)
			}
		}
	})
}
