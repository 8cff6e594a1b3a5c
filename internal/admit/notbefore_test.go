package admit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestExcessKeepsLeakyNotBefore: with a leaky tier that queues a key's
// jobs one second apart and a token tier that is out of tokens, the jobs
// the token tier calls excess still may not start before the leaky tier
// allows. They go to the backlog with the leaky tier's not-before, and
// the answer says so.
func TestExcessKeepsLeakyNotBefore(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 10}
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 3}
    backlog: {capacity: 100, leak_rate: 100/s}
`, setupOptions{})
	var got []admit.Answer
	for range 5 {
		got = append(got, submit(t, a, request("q", "c")))
	}
	stored := backlogJobs(t, b, "q")
	for i, ans := range got[1:] {
		n := i + 2
		if ans.Reply.Status != spillway.Queued {
			t.Fatalf("job %d: %+v, want queued", n, ans.Reply)
		}
		want := got[0].Decision.At.Add(time.Duration(n-1) * time.Second)
		if d := ans.Decision.NotBefore.Sub(want); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("job %d (%s): the tiers' not-before %v, want %v (the leaky tier's)", n, ans.Decision.Verdict, ans.Decision.NotBefore, want)
		}
		if ans.Reply.NotBefore == nil || !ans.Reply.NotBefore.Equal(ans.Decision.NotBefore) {
			t.Errorf("job %d (%s): answered not_before %v, want %v", n, ans.Decision.Verdict, ans.Reply.NotBefore, ans.Decision.NotBefore)
		}
		if j, ok := stored[ans.Reply.ID]; !ok || !j.NotBefore.Equal(ans.Decision.NotBefore) {
			t.Errorf("job %d (%s): stored with not-before %v (found %t), want %v", n, ans.Decision.Verdict, j.NotBefore, ok, ans.Decision.NotBefore)
		}
	}
	if v := got[4].Decision.Verdict; v != bucket.Excess {
		t.Errorf("job 5: verdict %s, want excess (the token tier is out of tokens)", v)
	}
}

// backlogJobs reads every job in a queue's backlog, by id (headers only).
func backlogJobs(t *testing.T, b *testBundle, q string) map[string]queue.Job {
	t.Helper()
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, queue.StreamName(q, queue.Backlog))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]queue.Job{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("backlog %s message %d: %v", q, seq, err)
		}
		j, err := queue.ParseJob(m.Header, nil)
		if err != nil {
			t.Fatal(err)
		}
		jobs[j.ID] = j
	}
	return jobs
}

var algorithms = []string{"leaky_bucket", "token_bucket", "fixed_window", "sliding_log", "sliding_window"}

// randomTier is a YAML limit tier of algorithm alg on key, with limits
// tight enough that a burst of a few jobs is delayed or refused.
func randomTier(rng *rand.Rand, alg, key string) string {
	rates := []string{"1/s", "2/s", "1/m", "30/m", "1/h"}
	switch alg {
	case "leaky_bucket":
		burst := rng.IntN(5)
		return fmt.Sprintf(`{key: %q, algorithm: leaky_bucket, rate: %s, burst: %d, delay: %d}`,
			key, rates[rng.IntN(len(rates))], burst, rng.IntN(burst+1))
	case "token_bucket":
		return fmt.Sprintf(`{key: %q, algorithm: token_bucket, rate: %s, burst: %d}`, key, rates[rng.IntN(len(rates))], 1+rng.IntN(4))
	}
	windows := []string{"1s", "10s", "1m", "1h"}
	return fmt.Sprintf(`{key: %q, algorithm: %s, limit: %d, window: %s}`, key, alg, 1+rng.IntN(4), windows[rng.IntN(len(windows))])
}

// TestNotBeforeIsLatestOfTiers is a property over every pair of
// algorithms, on the memory and the Redis store: a job that goes to the
// backlog is stored, and answered, with the latest not-before of its
// tiers — each tier's decided on its own, in a model bucket that replays
// the store's decisions at their times — and with none when no tier
// delays it.
func TestNotBeforeIsLatestOfTiers(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(len(store))))
			var yaml strings.Builder
			yaml.WriteString("queues:\n")
			type pair struct{ name, first, second string }
			var pairs []pair
			keys := []string{"header:X-Client", "global", "header:X-Other"}
			for _, first := range algorithms {
				for _, second := range algorithms {
					p := pair{name: fmt.Sprintf("p%d", len(pairs)), first: first, second: second}
					pairs = append(pairs, p)
					fmt.Fprintf(&yaml, "  - name: %s\n    limits:\n      - %s\n      - %s\n    backlog: {capacity: 1000, leak_rate: 1/s}\n",
						p.name, randomTier(rng, first, "header:X-Client"), randomTier(rng, second, keys[rng.IntN(len(keys))]))
				}
			}
			var o setupOptions
			if store == "redis" {
				_, o.primary = redisStore(t)
			}
			a, b := setup(t, yaml.String(), o)
			for _, p := range pairs {
				q := b.Config.Queue(p.name)
				model := make([]bucket.Bucket, len(q.Limits))
				var answers []admit.Answer
				for range 4 + rng.IntN(5) {
					// Every key header is sent: a tier's missing header is
					// refused 400 bad-key, which is not this property.
					r := request(p.name, "c")
					r.Keys = func(name string) string { return map[string]string{"X-Client": "c", "X-Other": "o"}[name] }
					ans := submit(t, a, r)
					answers = append(answers, ans)
					checkNotBefore(t, q, model, ans)
				}
				stored := backlogJobs(t, b, p.name)
				for i, ans := range answers {
					if ans.Reply.Status != spillway.Queued {
						continue
					}
					j, ok := stored[ans.Reply.ID]
					var want time.Time
					if ans.Decision.NotBefore.After(ans.Decision.At) {
						want = ans.Decision.NotBefore
					}
					if !ok || !j.NotBefore.Equal(want) {
						t.Errorf("%s (%s, %s) job %d (%s): stored with not-before %v (found %t), want %v",
							p.name, p.first, p.second, i+1, ans.Decision.Verdict, j.NotBefore, ok, want)
					}
				}
			}
		})
	}
}

// checkNotBefore decides ans's job again in the model, tier by tier at
// the store's time, and checks that the answer's not-before is the latest
// of the tiers'.
func checkNotBefore(t *testing.T, q *config.Queue, model []bucket.Bucket, ans admit.Answer) {
	t.Helper()
	d := ans.Decision
	latest := d.At
	next := make([]bucket.Bucket, len(model))
	copy(next, model)
	worst := bucket.Admitted
	for i, l := range q.Limits {
		td, err := l.Limit.Decide(&next[i], d.At, 1)
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, td.Verdict)
		if td.NotBefore.After(latest) {
			latest = td.NotBefore
		}
	}
	if worst != d.Verdict {
		t.Fatalf("queue %s: the model's tiers say %s, the store %s: the model is not the store's", q.Name, worst, d.Verdict)
	}
	if worst != bucket.Rejected {
		copy(model, next)
	}
	if worst == bucket.Rejected || ans.Reply.Status == spillway.Rejected {
		return
	}
	var want *time.Time
	if latest.After(d.At) {
		w := latest.UTC()
		want = &w
	}
	if ans.Reply.Status == spillway.Queued && (want == nil) != (ans.Reply.NotBefore == nil) ||
		want != nil && ans.Reply.NotBefore != nil && !want.Equal(*ans.Reply.NotBefore) {
		t.Errorf("queue %s (%s by tier %d): answered not_before %v, want the tiers' latest %v", q.Name, d.Verdict, d.Tier, ans.Reply.NotBefore, want)
	}
}
