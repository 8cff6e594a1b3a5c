package bucketbench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// The Redis store against github.com/go-redis/redis_rate/v10 on one
// redis-server started once for the whole benchmark, each with a go-redis
// client of its own (default options but for a pool of 64 connections, so
// that no caller of redis_rate waits for a connection). 1000 keys
// round-robin, limits loose enough that both allow everything: Spillway's
// leaky bucket at 1,000,000/s with burst 1000, redis_rate's GCRA at
// PerSecond(1000000). "callers" goroutines split b.N; every operation's
// latency is recorded and reported as p50-ns and p99-ns.
//
//	go test -run '^$' -bench Redis -count 3 ./bench/bucketbench/

// runRedisCallers runs op b.N times split over callers goroutines, caller i
// starting at key i·(keys/callers), and reports latency percentiles.
func runRedisCallers(b *testing.B, callers int, op func(key int) error) {
	// Warm up: connections dialled, scripts cached.
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			// Long enough that neither store is measured against a
			// server or a CPU still warming up: whichever runs first
			// would otherwise pay for it.
			for j := range 500 / callers {
				if err := op((i + j) % len(keyNames)); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()

	lat := make([][]time.Duration, callers)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range callers {
		n := b.N / callers
		if i < b.N%callers {
			n++
		}
		lat[i] = make([]time.Duration, 0, n)
		wg.Go(func() {
			k := i * (len(keyNames) / callers)
			for range n {
				start := time.Now()
				if err := op(k); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(start))
				if k++; k == len(keyNames) {
					k = 0
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2]), "p50-ns")
	b.ReportMetric(float64(all[len(all)*99/100]), "p99-ns")
}

func newBenchClient(b *testing.B, srv *redistest.Server) *redis.Client {
	b.Helper()
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	opts.PoolSize = 64
	client := redis.NewClient(opts)
	b.Cleanup(func() { _ = client.Close() })
	return client
}

func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	limit, err := bucket.Spec{Rate: "1000000/s", Burst: 1000, NoDelay: true}.Build()
	if err != nil {
		b.Fatal(err)
	}
	for _, callers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("store=spillway/callers=%d", callers), func(b *testing.B) {
			store, err := redisbucket.New(newBenchClient(b, srv), redisbucket.WithPrefix(redistest.KeyPrefix(b)))
			if err != nil {
				b.Fatal(err)
			}
			runRedisCallers(b, callers, func(k int) error {
				tiers := [1]bucket.Tier{{Key: keyNames[k], Limit: limit}}
				d, err := store.Decide(ctx, "bench", tiers[:], 1)
				if err == nil && d.Verdict != bucket.Admitted {
					err = fmt.Errorf("spillway: %s for key %d", d.Verdict, k)
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("store=redis_rate/callers=%d", callers), func(b *testing.B) {
			limiter := redis_rate.NewLimiter(newBenchClient(b, srv))
			prefix := redistest.KeyPrefix(b)
			keys := make([]string, len(keyNames))
			for i, k := range keyNames {
				keys[i] = prefix + k
			}
			rl := redis_rate.PerSecond(1_000_000)
			runRedisCallers(b, callers, func(k int) error {
				res, err := limiter.Allow(ctx, keys[k], rl)
				if err == nil && res.Allowed == 0 {
					err = fmt.Errorf("redis_rate: denied key %d", k)
				}
				return err
			})
		})
	}
}
