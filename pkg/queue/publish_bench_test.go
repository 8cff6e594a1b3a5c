package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// BenchmarkPublish compares the Publisher — 1024 callers, each waiting for
// its own PubAck — with raw jetstream.PublishMsgAsync of the same messages
// (built the same way, then fired all at once and every ack awaited) on one
// embedded server with file storage. The ratio is the publisher's own cost.
//
//	go test -run '^$' -bench Publish -count 3 ./pkg/queue/
func BenchmarkPublish(b *testing.B) {
	payload := make([]byte, 256)
	for _, impl := range []string{"raw_async", "publisher"} {
		b.Run("impl="+impl, func(b *testing.B) {
			ctx := context.Background()
			js := queuetest.Start(b).JetStream(b)
			cfg := Config{Name: "bench", Capacity: 10_000_000}
			if err := EnsureStreams(ctx, js, cfg); err != nil {
				b.Fatal(err)
			}
			jobs := make([]*Job, b.N)
			for i := range jobs {
				jobs[i] = &Job{ID: fmt.Sprint("job-", i), Queue: "bench", Key: fmt.Sprint("k", i%100), Cost: 1, Payload: payload, EnqueuedAt: time.Now()}
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			switch impl {
			case "raw_async":
				for i := range b.N {
					m, err := jobs[i].message(Ready)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := js.PublishMsgAsync(m); err != nil {
						b.Fatal(err)
					}
				}
				select {
				case <-js.PublishAsyncComplete():
				case <-time.After(time.Minute):
					b.Fatal("acks did not arrive")
				}
			case "publisher":
				pub, err := NewPublisher(js, 0)
				if err != nil {
					b.Fatal(err)
				}
				const callers = 1024
				var wg sync.WaitGroup
				for c := range callers {
					wg.Go(func() {
						for i := c; i < b.N; i += callers {
							if _, err := pub.Publish(ctx, Ready, jobs[i]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
