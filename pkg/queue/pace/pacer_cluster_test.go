package pace_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// TestPacerOnCluster: two pacers of one queue, each with its own cluster
// client (two worker processes), book starts on a 3-master Redis Cluster
// exactly 1/rate apart, as they do on one server.
func TestPacerOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	rate, err := bucket.ParseRate("20/s")
	if err != nil {
		t.Fatal(err)
	}
	var pacers []*pace.StorePacer
	for range 2 {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { _ = c.Close() })
		st, err := redisbucket.New(c)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pace.NewPacer(st, "paced", rate)
		if err != nil {
			t.Fatal(err)
		}
		pacers = append(pacers, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var starts []time.Time
	var wg sync.WaitGroup
	for _, p := range pacers {
		for range 3 {
			wg.Go(func() {
				for range 4 {
					before := time.Now()
					d, err := p.Reserve(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					starts = append(starts, before.Add(d))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(starts) != 24 {
		t.Fatalf("%d bookings, want 24", len(starts))
	}
	// The starts are what Redis booked, seen from this clock: consecutive
	// ones are 50 ms apart, give or take the round trips' spread.
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	span := starts[len(starts)-1].Sub(starts[0])
	if span < 23*50*time.Millisecond-250*time.Millisecond {
		t.Errorf("24 bookings at 20/s span %v, want about %v: the pacers did not share one leak", span, 23*50*time.Millisecond)
	}
}
