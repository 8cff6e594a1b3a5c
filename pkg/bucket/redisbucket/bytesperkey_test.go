package redisbucket_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// TestRedisBytesPerKey measures what a client key's state costs in
// redis-server, per algorithm, as the admitter names its keys (the default
// prefix, the queue as group, "<tier>:<client key>"): MEMORY USAGE of each
// key (median) and the growth of INFO's used_memory per key. The figures
// feed the capacity model of docs/scaling.md; the test asserts only that
// every key was written.
func TestRedisBytesPerKey(t *testing.T) {
	const keys = 2000
	algorithms := []struct {
		name string
		spec bucket.Spec
		jobs int // decisions per key, so that a log holds entries
	}{
		{"leaky_bucket", bucket.Spec{Algorithm: "leaky_bucket", Rate: "1/m", Burst: 20}, 1},
		{"token_bucket", bucket.Spec{Algorithm: "token_bucket", Rate: "1/m", Burst: 20}, 1},
		{"fixed_window", bucket.Spec{Algorithm: "fixed_window", Limit: 100, Window: "1h"}, 1},
		{"sliding_window", bucket.Spec{Algorithm: "sliding_window", Limit: 100, Window: "1h"}, 1},
		{"sliding_log, 10 jobs", bucket.Spec{Algorithm: "sliding_log", Limit: 100, Window: "1h"}, 10},
	}
	for _, a := range algorithms {
		t.Run(strings.Fields(a.name)[0], func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithOwnProcess())
			client := newClient(t, srv)
			s, err := redisbucket.New(client)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			used := func() int64 {
				info, err := client.InfoMap(ctx, "memory").Result()
				if err != nil {
					t.Fatal(err)
				}
				n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			// Slow rates and long windows, so that no key expires while it is
			// measured. One decision first, so that the script is loaded before the
			// baseline.
			l := mustLimit(t, a.spec)
			if _, err := s.Decide(ctx, "warm", []bucket.Tier{{Key: "0:warm", Limit: l}}, 1); err != nil {
				t.Fatal(err)
			}
			base := used()
			for i := range keys {
				key := fmt.Sprintf("0:203.0.%d.%d", i/256, i%256)
				for range a.jobs {
					if _, err := s.Decide(ctx, "jobs", []bucket.Tier{{Key: key, Limit: l}}, 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			grown := used() - base
			names, err := client.Keys(ctx, "*jobs*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(names) != keys {
				t.Fatalf("%d keys in Redis, want %d", len(names), keys)
			}
			var sizes []int64
			for _, k := range names[:200] {
				n, err := client.MemoryUsage(ctx, k, 0).Result()
				if err != nil {
					t.Fatal(err)
				}
				sizes = append(sizes, n)
			}
			slices.Sort(sizes)
			t.Logf("figure: Redis bytes per key, %s: MEMORY USAGE median %d (key %q, %d bytes of name), used_memory %.1f per key over %d keys",
				a.name, sizes[len(sizes)/2], names[0], len(names[0]), float64(grown)/keys, keys)
		})
	}
}
