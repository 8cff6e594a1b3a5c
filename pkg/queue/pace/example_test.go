package pace_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// Two workers' pacers over one key-value bucket share one leak rate: at
// 10/s, the starts they book are 100ms apart whoever books them.
func ExampleNewKVPacer() {
	js, stop := queuetest.StartExample() // in production: jetstream.New(nc) on your NATS connection
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := pace.OpenPacerBucket(ctx, js, 1)
	if err != nil {
		log.Fatal(err)
	}
	rate := bucket.Rate{Count: 10, Per: time.Second}
	a, err := pace.NewKVPacer(kv, "emails", rate)
	if err != nil {
		log.Fatal(err)
	}
	b, err := pace.NewKVPacer(kv, "emails", rate)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range []*pace.KVPacer{a, b, a} {
		wait, err := p.Reserve(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("start in", wait.Round(100*time.Millisecond))
	}
	// Output:
	// start in 0s
	// start in 100ms
	// start in 200ms
}
