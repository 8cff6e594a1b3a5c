package redisbucket_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// TestDecideBatchEqualsDecide: a batch of 2,500 jobs (40 script runs of up
// to 64 decisions, one after the other) over every algorithm, with a
// shared tier, decides as Decide called once per job in the same order,
// on a twin store from the same state: job i+1 sees job i's decision. The
// memory store's DecideBatch is held to the same answers.
func TestDecideBatchEqualsDecide(t *testing.T) {
	t.Parallel()
	batchStore, b := setup(t, true)
	twin, err := redisbucket.New(b.client, redisbucket.WithPrefix(b.prefix+"twin:"), redisbucket.WithClock(b.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := bucket.NewMemory(bucket.WithClock(b.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	limits := []bucket.Limit{
		mustLimit(t, bucket.Spec{Rate: "1/s", Burst: 40, Delay: 3}),
		mustLimit(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 30}),
		mustLimit(t, bucket.Spec{Algorithm: "fixed_window", Limit: 25, Window: "60s"}),
		mustLimit(t, bucket.Spec{Algorithm: "sliding_log", Limit: 20, Window: "60s"}),
		mustLimit(t, bucket.Spec{Algorithm: "sliding_window", Limit: 35, Window: "60s"}),
	}
	global := mustLimit(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 900})
	rng := rand.New(rand.NewPCG(1, 2))
	jobs := make([]bucket.Job, 2500)
	for i := range jobs {
		alg := rng.IntN(len(limits))
		key := strconv.Itoa(alg) + ":k" + strconv.Itoa(rng.IntN(10))
		jobs[i] = bucket.Job{Cost: int64(1 + rng.IntN(2)), Tiers: []bucket.Tier{{Key: key, Limit: limits[alg]}, {Key: "g", Limit: global}}}
	}
	ctx := context.Background()
	b.clock.Set(buckettest.Base.Add(time.Second))
	got, err := batchStore.DecideBatch(ctx, "q", jobs)
	if err != nil {
		t.Fatal(err)
	}
	gotMem, err := mem.DecideBatch(ctx, "q", jobs)
	if err != nil {
		t.Fatal(err)
	}
	verdicts := map[bucket.Verdict]int{}
	for i, j := range jobs {
		want, err := twin.Decide(ctx, "q", j.Tiers, j.Cost)
		if err != nil {
			t.Fatal(err)
		}
		verdicts[want.Verdict]++
		if !equalDecision(got[i], want) || got[i].TierAt != want.TierAt {
			t.Fatalf("job %d: DecideBatch %+v\n          Decide %+v", i, got[i], want)
		}
		if !equalDecision(gotMem[i], want) || gotMem[i].TierAt != want.TierAt {
			t.Fatalf("job %d: memory DecideBatch %+v\n          Redis Decide %+v", i, gotMem[i], want)
		}
		// Each batch decision carries its own job for its refund.
		for _, d := range []bucket.Decision{got[i], gotMem[i]} {
			if g, tiers, cost := d.Request(); g != "q" || cost != j.Cost || len(tiers) != len(j.Tiers) || &tiers[0] != &j.Tiers[0] {
				t.Fatalf("job %d: the decision's request is (%q, %d tiers, cost %d), want the job's", i, g, len(tiers), cost)
			}
		}
	}
	for _, v := range []bucket.Verdict{bucket.Admitted, bucket.Queued, bucket.Excess, bucket.Rejected} {
		if verdicts[v] == 0 {
			t.Errorf("no %s decision among %v: the jobs do not test it", v, verdicts)
		}
	}
	if _, err := batchStore.DecideBatch(ctx, "q{", jobs[:1]); err == nil {
		t.Error("a group with a brace: no error")
	}
	if _, err := batchStore.DecideBatch(ctx, "q", []bucket.Job{{Tiers: jobs[0].Tiers, Cost: 0}}); err == nil {
		t.Error("cost 0: no error")
	}
}
