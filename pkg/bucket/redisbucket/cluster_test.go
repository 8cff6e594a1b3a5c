package redisbucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// clusterClient connects to the test binary's shared 3-master cluster.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redistest.SharedCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// TestClusterPartialRefusal: a per-key tier and a global tier live in
// different slots of a 3-master cluster. A job the global leaky bucket
// rejects after the per-key tier took its units leaves the per-key tier as
// it was (all-or-nothing across slots), on a frozen clock and at Redis TIME.
func TestClusterPartialRefusal(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	ctx := context.Background()
	for _, clock := range []string{"frozen", "Redis TIME"} {
		t.Run(clock, func(t *testing.T) {
			opts := []redisbucket.Option{redisbucket.WithPrefix(redistest.KeyPrefix(t))}
			if clock == "frozen" {
				c := buckettest.NewClock(buckettest.Base)
				opts = append(opts, redisbucket.WithClock(c.Now))
			}
			store, err := redisbucket.New(client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			perKey := mustLimit(t, bucket.Spec{Rate: "1/h", Burst: 4, Delay: 4})
			global := mustLimit(t, bucket.Spec{Rate: "1/h", Burst: 2, Delay: 2})
			// Three clients fill the global bucket (burst 2: 3 jobs in service).
			for i := range 3 {
				d, err := store.Decide(ctx, "q", []bucket.Tier{{Key: fmt.Sprint("k", i), Limit: perKey}, {Key: "global", Limit: global}}, 1)
				if err != nil || d.Verdict == bucket.Rejected {
					t.Fatalf("job %d: %+v %v", i, d, err)
				}
			}
			// Alice is refused by the global tier, five times: her own tier
			// (burst 4, so 5 jobs) must not be charged.
			alice := []bucket.Tier{{Key: "alice", Limit: perKey}, {Key: "global", Limit: global}}
			for i := range 5 {
				d, err := store.Decide(ctx, "q", alice, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Verdict != bucket.Rejected || d.Tier != 1 || d.Consumed != 0 {
					t.Fatalf("refusal %d: %+v, want Rejected by tier 1", i, d)
				}
			}
			// Alice alone: her tier still has its whole burst.
			for i := range 5 {
				d, err := store.Decide(ctx, "q", alice[:1], 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Verdict == bucket.Rejected {
					t.Fatalf("alice's job %d alone was rejected: her tier was charged by the refused jobs", i)
				}
			}
			if d, _ := store.Decide(ctx, "q", alice[:1], 1); d.Verdict != bucket.Rejected {
				t.Fatalf("alice's 6th job: %v, want Rejected", d.Verdict)
			}
		})
	}
	_ = time.Second
}

// TestClusterKeysSpread: the state of 10,000 keys of one queue spreads over
// the three masters, each holding at least 20 % of it (DBSIZE per master),
// because a key's hash tag holds the key, not only the queue.
func TestClusterKeysSpread(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3) // its own: DBSIZE counts every key
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	store, err := redisbucket.New(client)
	if err != nil {
		t.Fatal(err)
	}
	perKey := mustLimit(t, bucket.Spec{Rate: "1/h", Burst: 4, Delay: 4})
	const keys = 10_000
	jobs := make([]bucket.Job, 0, 500)
	for lo := 0; lo < keys; lo += cap(jobs) {
		jobs = jobs[:0]
		for i := lo; i < lo+cap(jobs); i++ {
			jobs = append(jobs, bucket.Job{Tiers: []bucket.Tier{{Key: fmt.Sprint("client-", i), Limit: perKey}}, Cost: 1})
		}
		if _, err := store.DecideBatch(ctx, "email", jobs); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(0)
	counts := make([]int64, len(cl.Masters))
	for i := range cl.Masters {
		n, err := cl.Do(ctx, i, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		counts[i] = n.(int64)
		total += counts[i]
	}
	if total != keys {
		t.Fatalf("%d keys in the cluster, want %d", total, keys)
	}
	for i, n := range counts {
		t.Logf("figure: master %d holds %d of %d keys (%.1f %%)", i, n, keys, 100*float64(n)/keys)
		if n*5 < keys {
			t.Errorf("master %d holds %d of %d keys, under 20 %%", i, n, keys)
		}
	}
}
