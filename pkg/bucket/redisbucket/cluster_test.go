package redisbucket_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestConformanceCluster runs the conformance suite through a cluster
// client on the shared 3-master cluster: every decision of more than one
// tier key is split over slots.
func TestConformanceCluster(t *testing.T) {
	client := clusterClient(t)
	buckettest.Exercise(t, func(t *testing.T, clock func() time.Time) bucket.Store {
		s, err := redisbucket.New(client, redisbucket.WithClock(clock), redisbucket.WithPrefix(redistest.KeyPrefix(t)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestReliabilityHotKeyCluster is TestReliabilityHotKeyRedis on the
// cluster: 1,000 goroutines on one key get exactly what each algorithm
// allows, at Redis TIME and on a frozen clock.
func TestReliabilityHotKeyCluster(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	per := buckettest.HotKeyPer()
	frozen := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, c := range buckettest.HotKeyCases() {
		l := mustLimit(t, c.Spec)
		for _, clock := range []string{"frozen", "Redis TIME"} {
			if clock != "frozen" && c.Aligned {
				continue
			}
			opts := []redisbucket.Option{redisbucket.WithPrefix(redistest.KeyPrefix(t))}
			if clock == "frozen" {
				opts = append(opts, redisbucket.WithClock(func() time.Time { return frozen }))
			}
			store, err := redisbucket.New(client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			got := buckettest.HotKey(t, store, l, 1000, per)
			buckettest.CheckHotKey(t, l, c, "cluster, "+clock+" clock", got, 1000, 1000*per)
		}
	}
}

// TestReliabilityClusterFaults breaks a cluster of its own while 16
// goroutines decide two-tier jobs (a per-key and a global tier, different
// slots): SCRIPT FLUSH on every master never surfaces; a master that sleeps
// (DEBUG SLEEP) fails the decisions touching it within the store's timeout
// and no others hang; a killed master fails its decisions with an error,
// never a verdict, and once restarted, decisions succeed again by
// themselves. Full mode (SPILLWAY_RELIABILITY=full) runs each phase longer.
func TestReliabilityClusterFaults(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, redistest.WithArgs("--enable-debug-command", "yes"))
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisbucket.New(client, redisbucket.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	phase := 500 * time.Millisecond
	if buckettest.ReliabilityFull() {
		phase = 5 * time.Second
	}
	perKey := mustLimit(t, bucket.Spec{Rate: "1000000/s", Burst: 1000})
	global := mustLimit(t, bucket.Spec{Rate: "1000000/s", Burst: 100000})

	// load decides for d from 16 goroutines and counts outcomes; a decision
	// slower than slow is counted as hung.
	load := func(d, slow time.Duration) (ok, failed, hung int64) {
		var okN, failN, hungN atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for g := range 16 {
			wg.Go(func() {
				for i := 0; time.Now().Before(end); i++ {
					tiers := []bucket.Tier{{Key: fmt.Sprintf("k%d-%d", g, i%50), Limit: perKey}, {Key: "global", Limit: global}}
					start := time.Now()
					_, err := store.Decide(ctx, "q", tiers, 1)
					if time.Since(start) > slow {
						hungN.Add(1)
					}
					if err != nil {
						failN.Add(1)
					} else {
						okN.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return okN.Load(), failN.Load(), hungN.Load()
	}

	// SCRIPT FLUSH on every master, over and over.
	stop := make(chan struct{})
	var flushes atomic.Int64
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := cl.Do(ctx, i%3, "SCRIPT", "FLUSH"); err != nil {
				t.Error(err)
				return
			}
			flushes.Add(1)
		}
	})
	ok, failed, _ := load(phase, time.Minute)
	close(stop)
	flusher.Wait()
	if failed != 0 || ok == 0 {
		t.Errorf("script flush: %d decided, %d failed; want none failed", ok, failed)
	}
	t.Logf("figure: cluster, SCRIPT FLUSH ×%d on the masters: %d decisions, %d failed", flushes.Load(), ok, failed)

	// A slow master: DEBUG SLEEP on the global tier's node.
	gnode := nodeOf(t, cl, store.Key("q", global.Algorithm(), "global"))
	slept := make(chan error, 1)
	go func() {
		// A deadline past the sleep: the kit's default (2 s) would race it.
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := cl.Do(sctx, gnode, "DEBUG", "SLEEP", "2")
		slept <- err
	}()
	time.Sleep(100 * time.Millisecond) // the sleep has begun; decisions then find the node busy
	ok, failed, hung := load(phase, 3*time.Second)
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	if hung != 0 || failed == 0 {
		t.Errorf("slow master: %d decided, %d failed, %d took over 3 s; want failures within the timeout", ok, failed, hung)
	}
	t.Logf("figure: cluster, a master sleeping 2 s: %d decisions, %d failed, none over 3 s", ok, failed)

	// A killed master: decisions touching it fail; after its restart they
	// succeed again without a new client.
	cl.KillNode(gnode)
	ok, failed, _ = load(phase, time.Minute)
	if ok != 0 || failed == 0 {
		t.Errorf("killed master: %d decided, %d failed; want every decision (each has the global tier) to fail", ok, failed)
	}
	restarted := time.Now()
	cl.RestartNode(t, gnode)
	deadline := time.Now().Add(30 * time.Second)
	for {
		tiers := []bucket.Tier{{Key: "after", Limit: perKey}, {Key: "global", Limit: global}}
		_, err := store.Decide(ctx, "q", tiers, 1)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions still fail 30 s after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the client's recovery
	}
	t.Logf("figure: cluster, a killed master restarted: decisions succeed %v after the restart began", time.Since(restarted).Round(time.Millisecond))
	ok, failed, _ = load(phase, time.Minute)
	if failed != 0 || ok == 0 {
		t.Errorf("after the restart: %d decided, %d failed", ok, failed)
	}
}

// nodeOf returns the index of the master holding key's slot (StartCluster
// gives master i the i-th equal share of the slots).
func nodeOf(t *testing.T, cl *redistest.Cluster, key string) int {
	t.Helper()
	slot, err := cl.Do(context.Background(), 0, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(cl.Masters))
	return int(slot.(int64) * n / 16384)
}

// BenchmarkDecideTwoTiers compares a decision of a per-key and a global
// tier on one server (one script) and on a 3-master cluster (one script
// per slot, in one pipeline), from parallel callers.
func BenchmarkDecideTwoTiers(b *testing.B) {
	perKey := mustLimit(b, bucket.Spec{Rate: "1000000/s", Burst: 1000})
	global := mustLimit(b, bucket.Spec{Rate: "100000000/s", Burst: 1000000})
	run := func(b *testing.B, client redisbucket.Client) {
		store, err := redisbucket.New(client, redisbucket.WithPrefix(redistest.KeyPrefix(b)))
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		b.SetParallelism(16) // 32 callers on 2 cores: decisions share round trips
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			k := fmt.Sprint("k", n.Add(1))
			tiers := []bucket.Tier{{Key: k, Limit: perKey}, {Key: "global", Limit: global}}
			for pb.Next() {
				if _, err := store.Decide(context.Background(), "q", tiers, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("one server", func(b *testing.B) {
		srv := redistest.Start(b)
		run(b, newClient(b, srv))
	})
	b.Run("cluster", func(b *testing.B) { run(b, clusterClient(b)) })
}

// A refund of a decision split over slots gives each tier's units back at
// the time its own shard decided it: at Redis TIME each part's script reads
// its own clock, and a sliding log finds the entry to remove by its stamp.
// Every windowed algorithm, as the second tier (the part not decided at
// the decision's At).
func TestClusterSplitRefundAtEachPartsTime(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	ctx := context.Background()
	store, err := redisbucket.New(client, redisbucket.WithPrefix(redistest.KeyPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	global := mustLimit(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1000/s", Burst: 1000})
	for _, algo := range []string{"sliding_log", "fixed_window", "sliding_window"} {
		t.Run(algo, func(t *testing.T) {
			one := mustLimit(t, bucket.Spec{Algorithm: algo, Limit: 1, Window: "1h"})
			key := "alice-" + algo
			d, err := store.Decide(ctx, "q", []bucket.Tier{{Key: "global", Limit: global}, {Key: key, Limit: one}}, 1)
			if err != nil || d.Verdict != bucket.Admitted {
				t.Fatalf("first job: %+v %v, want Admitted", d, err)
			}
			if err := d.Refund(ctx); err != nil {
				t.Fatalf("Refund: %v", err)
			}
			if d, err := store.Decide(ctx, "q", []bucket.Tier{{Key: key, Limit: one}}, 1); err != nil || d.Verdict != bucket.Admitted {
				t.Fatalf("%s alone after the refund: %+v %v, want Admitted: the refund gave nothing back", key, d, err)
			}
		})
	}
}
