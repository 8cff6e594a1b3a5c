package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// BenchmarkPublish compares the Publisher — 1024 callers, each publishing
// one job at a time with a cancellable context (as a request handler would)
// and waiting for its own PubAck — with raw jetstream.PublishMsgAsync of the
// same messages (built the same way, fired from one goroutine, every ack
// awaited) on one embedded server with file storage. Both sides end by
// checking that the stream holds every job. The ratio is the publisher's own
// cost; the publisher also sends Nats-Expected-Stream, which raw does not.
//
// The machine is shared and noisy, so compare the two within one round, with
// a fixed number of jobs, over several rounds (docs/performance.md):
//
//	for r in 1 2 3 4 5 6 7; do go test -run '^$' -bench Publish -benchtime 100000x -count 1 ./pkg/queue/; done
func BenchmarkPublish(b *testing.B) {
	payload := make([]byte, 256)
	for _, impl := range []string{"raw_async", "publisher"} {
		b.Run("impl="+impl, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			js := queuetest.Start(b).JetStream(b)
			cfg := queue.Config{Name: "bench", Capacity: 10_000_000}
			if err := queue.EnsureStreams(ctx, js, cfg); err != nil {
				b.Fatal(err)
			}
			jobs := make([]*queue.Job, b.N)
			for i := range jobs {
				jobs[i] = &queue.Job{ID: fmt.Sprint("job-", i), Queue: "bench", Key: fmt.Sprint("k", i%100), Cost: 1, Payload: payload, EnqueuedAt: time.Now()}
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			switch impl {
			case "raw_async":
				for i := range b.N {
					m, err := queue.MessageOf(jobs[i], queue.Ready)
					if err != nil {
						b.Fatal(err)
					}
					// A stall past jetstream's 200ms wait for a free
					// pending slot sends nothing: wait again.
					for {
						_, err = js.PublishMsgAsync(m)
						if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
							break
						}
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				select {
				case <-js.PublishAsyncComplete():
				case <-time.After(time.Minute):
					b.Fatal("acks did not arrive")
				}
			case "publisher":
				pub, err := queue.NewPublisher(js, 0)
				if err != nil {
					b.Fatal(err)
				}
				const callers = 1024
				var wg sync.WaitGroup
				for c := range callers {
					wg.Go(func() {
						for i := c; i < b.N; i += callers {
							if _, err := pub.Publish(ctx, queue.Ready, jobs[i]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			s, err := js.Stream(ctx, queue.StreamName("bench", queue.Ready))
			if err != nil {
				b.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if info.State.Msgs != uint64(b.N) {
				b.Fatalf("the stream holds %d jobs, want %d", info.State.Msgs, b.N)
			}
		})
	}
}
