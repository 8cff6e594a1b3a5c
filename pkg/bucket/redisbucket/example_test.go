package redisbucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// Decide a job of the queue "email" against two tiers: per API key (10 jobs
// a second, bursts of 20 of which 5 start at once) and for the whole queue.
// The example needs a Redis server on 127.0.0.1:6379, so it is compiled but
// not run by go test.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	store, err := redisbucket.New(client)
	if err != nil {
		fmt.Println(err)
		return
	}
	perKey, err := bucket.Spec{Rate: "10/s", Burst: 20, Delay: 5}.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	global, err := bucket.Spec{Algorithm: "token_bucket", Rate: "500/s", Burst: 1000}.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	tiers := []bucket.Tier{
		{Key: "0:alice", Limit: perKey},
		{Key: "1:global", Limit: global},
	}
	// Keys: spillway:bucket:{email:fabcff6725782279}:leaky_bucket:0:alice
	// and spillway:bucket:{email:ceb7811813ac846d}:token_bucket:1:global
	// (Store.Key): the hash tag holds a hash of the tier key.
	d, err := store.Decide(ctx, "email", tiers, 1)
	if err != nil {
		fmt.Println("store unavailable:", err)
		return
	}
	switch d.Verdict {
	case bucket.Admitted:
		fmt.Println("run now;", d.Remaining, "left")
	case bucket.Queued:
		fmt.Println("start at", d.NotBefore.Format(time.RFC3339Nano))
	default:
		fmt.Println("refused by tier", d.Tier, "; retry after", d.RetryAfter)
	}
}

// A Redis Cluster works alike: a decision whose tiers have different hash
// tags runs one script per tag, in one pipeline. With WithClock the store decides at the given time instead of Redis
// TIME, as `spillctl simulate --store redis` does.
func ExampleWithClock() {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}})
	defer cluster.Close()

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := redisbucket.New(cluster,
		redisbucket.WithClock(func() time.Time { return now }),
		redisbucket.WithPrefix("simulate:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	limit, err := bucket.Spec{Algorithm: "sliding_window", Limit: 100, Window: "1m"}.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := store.Decide(context.Background(), "reports", []bucket.Tier{{Key: "bob", Limit: limit}}, 1)
	fmt.Println(d.Verdict, d.At.Equal(now), err)
}
