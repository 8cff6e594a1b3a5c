package bucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// nginx's limit_req zone rate=1r/s with burst=5: ten requests at once — one
// runs now, five wait a second apart, four are rejected.
func ExampleLimit_Decide() {
	limit, err := bucket.Spec{Rate: "1/s", Burst: 5}.Build()
	if err != nil {
		panic(err)
	}
	var b bucket.Bucket
	start := time.Unix(1_800_000_000, 0)
	for i := 1; i <= 10; i++ {
		d, _ := limit.Decide(&b, start, 1)
		switch d.Verdict {
		case bucket.Queued:
			fmt.Printf("%d queued, starts +%v\n", i, d.NotBefore.Sub(start))
		default:
			fmt.Printf("%d %s\n", i, d.Verdict)
		}
	}
	// Output:
	// 1 admitted
	// 2 queued, starts +1s
	// 3 queued, starts +2s
	// 4 queued, starts +3s
	// 5 queued, starts +4s
	// 6 queued, starts +5s
	// 7 rejected
	// 8 rejected
	// 9 rejected
	// 10 rejected
}

// Two tiers: a per-client leaky bucket and a global token bucket. The job
// gets the worst verdict; a rejected job costs neither tier anything.
func ExampleMemory_Decide() {
	perClient, _ := bucket.Spec{Rate: "10/s", Burst: 2, NoDelay: true}.Build()
	global, _ := bucket.Spec{Algorithm: "token_bucket", Rate: "500/s", Burst: 1000}.Build()
	store, _ := bucket.NewMemory()
	tiers := []bucket.Tier{
		{Key: "0:client-42", Limit: perClient},
		{Key: "1:global", Limit: global},
	}
	for range 4 {
		d, err := store.Decide(context.Background(), "email", tiers, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (tier %d, %d left)\n", d.Verdict, d.Tier, d.Remaining)
	}
	// Output:
	// admitted (tier 0, 2 left)
	// admitted (tier 0, 1 left)
	// admitted (tier 0, 0 left)
	// rejected (tier 0, 0 left)
}

func ExampleParseRate() {
	for _, s := range []string{"10/s", "600/m", "1/h", "5/10s", "10r/s"} {
		r, _ := bucket.ParseRate(s)
		fmt.Println(r.Count, r.Per)
	}
	_, err := bucket.ParseRate("10/fortnight")
	fmt.Println(err)
	// Output:
	// 10 1s
	// 600 1m0s
	// 1 1h0m0s
	// 5 10s
	// 10 1s
	// bucket: invalid rate "10/fortnight": unit "fortnight" is not s, m, h, ms or a positive Go duration such as 10s
}

// The admitter's path when the backlog is full: a job over two tiers is
// Excess on the global token bucket but took a unit from the per-client
// bucket. The backlog refuses it, so the admitter gives that unit back.
func ExampleDecision_Refund() {
	perClient, _ := bucket.Spec{Rate: "1/m", Burst: 5, NoDelay: true}.Build()
	global, _ := bucket.Spec{Algorithm: "token_bucket", Rate: "1/h", Burst: 1}.Build()
	store, _ := bucket.NewMemory()
	ctx := context.Background()
	tiers := []bucket.Tier{
		{Key: "0:client-42", Limit: perClient},
		{Key: "1:global", Limit: global},
	}
	for range 2 {
		d, _ := store.Decide(ctx, "email", tiers, 1)
		fmt.Printf("%s, consumed from tiers %02b\n", d.Verdict, d.Consumed)
		if d.Verdict == bucket.Excess {
			// Suppose the backlog is full (queue.ErrQueueFull): reject the
			// job and give back what it took.
			if err := d.Refund(ctx); err != nil {
				panic(err)
			}
		}
	}
	d, _ := store.Decide(ctx, "email", tiers[:1], 1)
	fmt.Printf("the client's next job: %s, %d left\n", d.Verdict, d.Remaining)
	// Output:
	// admitted, consumed from tiers 11
	// excess, consumed from tiers 01
	// the client's next job: admitted, 4 left
}
