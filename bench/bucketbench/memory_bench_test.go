package bucketbench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// The memory store against golang.org/x/time/rate kept in a per-key map,
// the way services usually hold per-client limiters. 1000 keys round-robin,
// the clock read inside every decision (time.Now for both), limits loose
// enough that both mostly allow. "goroutines" callers split b.N.

const benchKeys = 1000

// keyNames are the benchmarks' client keys, shared by the memory and Redis
// benchmarks.
var keyNames = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = fmt.Sprintf("client-%04d", i)
	}
	return k
}()

// runCallers runs op b.N times split over g goroutines, goroutine i starting
// at key i·(benchKeys/g).
func runCallers(b *testing.B, g int, op func(key int)) {
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range g {
		n := b.N / g
		if i < b.N%g {
			n++
		}
		wg.Go(func() {
			k := i * (benchKeys / g)
			for range n {
				op(k)
				k++
				if k == benchKeys {
					k = 0
				}
			}
		})
	}
	wg.Wait()
}

// xrateMutexMap is the common hand-written form: a mutex-guarded map of
// limiters, created on first use.
type xrateMutexMap struct {
	mu   sync.Mutex
	lims map[string]*rate.Limiter
}

func (m *xrateMutexMap) allow(key string) bool {
	m.mu.Lock()
	l, ok := m.lims[key]
	if !ok {
		l = rate.NewLimiter(1e6, 1000)
		m.lims[key] = l
	}
	m.mu.Unlock()
	return l.Allow()
}

func BenchmarkMemory(b *testing.B) {
	for _, g := range []int{1, 2} {
		b.Run(fmt.Sprintf("impl=xrate_mutex_map/goroutines=%d", g), func(b *testing.B) {
			m := &xrateMutexMap{lims: make(map[string]*rate.Limiter)}
			runCallers(b, g, func(k int) { m.allow(keyNames[k]) })
		})
		b.Run(fmt.Sprintf("impl=xrate_sync_map/goroutines=%d", g), func(b *testing.B) {
			var m sync.Map
			for _, k := range keyNames {
				m.Store(k, rate.NewLimiter(1e6, 1000))
			}
			runCallers(b, g, func(k int) {
				l, _ := m.Load(keyNames[k])
				l.(*rate.Limiter).Allow()
			})
		})
		for _, spec := range []bucket.Spec{
			{Algorithm: "token_bucket", Rate: "1000000/s", Burst: 1000},
			{Algorithm: "leaky_bucket", Rate: "1000000/s", Burst: 1000, NoDelay: true},
		} {
			b.Run(fmt.Sprintf("impl=spillway_%s/goroutines=%d", spec.Algorithm, g), func(b *testing.B) {
				l, err := spec.Build()
				if err != nil {
					b.Fatal(err)
				}
				s, err := bucket.NewMemory()
				if err != nil {
					b.Fatal(err)
				}
				tiers := make([][]bucket.Tier, benchKeys)
				for i, k := range keyNames {
					tiers[i] = []bucket.Tier{{Key: k, Limit: l}}
				}
				ctx := context.Background()
				runCallers(b, g, func(k int) {
					if _, err := s.Decide(ctx, "bench", tiers[k], 1); err != nil {
						panic(err)
					}
				})
			})
		}
	}
}

// BenchmarkClock is the cost of the clock read both sides include.
func BenchmarkClock(b *testing.B) {
	for range b.N {
		_ = time.Now().UnixNano()
	}
}
