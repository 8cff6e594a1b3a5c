package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A delivery of the leader's feed that never reaches it — as one sent to a
// connection whose server went down — still has its job run: here a
// second client pulls from the feed consumer, so the consumer counts a
// job delivered that the leader never sees, and it never acks, so the
// consumer would not send it again for a day. The job stolen while jobs
// keep coming is found by the next delivery's sequence; the one stolen
// last, by the feed's look at its consumer once it is quiet.
func TestBacklogFeedLostDeliveryStillRuns(t *testing.T) {
	t.Parallel()
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("feedloss"))
	rec := newRecorder()
	queuetest.RunWorker(t, b.JS, worker.WorkerConfig{Queue: b.Config, Observe: rec.observe}, func(ctx context.Context, j *queue.Job) error {
		rec.started(j)
		return nil
	})
	backlog := queue.StreamName("feedloss", queue.Backlog)
	var feed jetstream.Consumer
	rec.waitFor(t, 20*time.Second, "the leader's feed consumer", func() bool {
		c, err := b.JS.Consumer(ctx, backlog, worker.FeedConsumer)
		feed = c
		return err == nil
	})

	var jobs []*queue.Job
	// steal publishes jobs one at a time, each once the last ran, until
	// one is delivered to a second client of the feed consumer instead of
	// the leader: the server hands a job to one of the waiting pulls. That
	// one is the last published.
	steal := func() string {
		t.Helper()
		stolen := make(chan string, 1)
		go func() {
			defer close(stolen)
			batch, err := feed.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
			if err != nil {
				return
			}
			for m := range batch.Messages() { // never acked: the consumer takes it as delivered, and waits
				if j, err := queue.ParseJob(m.Headers(), nil); err == nil {
					stolen <- j.ID
				}
			}
		}()
		for {
			j := publishBacklog(t, ctx, b, "a", 1, time.Time{})[0]
			jobs = append(jobs, j)
			for !rec.ran(j.ID) {
				select {
				case id, ok := <-stolen:
					if !ok || id != j.ID {
						t.Fatalf("the second client got %q, want the job just published (%s)", id, j.ID)
					}
					return id
				case <-rec.changed:
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	midway := steal()
	jobs = append(jobs, publishBacklog(t, ctx, b, "a", 2, time.Time{})...)
	rec.waitFor(t, 20*time.Second, "the job stolen with jobs after it", func() bool { return rec.ran(midway) })
	last := steal()
	rec.waitFor(t, 20*time.Second, "the job stolen last", func() bool { return rec.ran(last) })
	rec.waitFor(t, 20*time.Second, "every job", func() bool {
		for _, j := range jobs {
			if !rec.ran(j.ID) {
				return false
			}
		}
		return true
	})
	rec.mu.Lock()
	for _, j := range jobs {
		if n := len(rec.starts[j.ID]); n != 1 {
			t.Errorf("job %s ran %d times, want once: the feed handed it over twice", j.ID, n)
		}
	}
	rec.mu.Unlock()
	// A job leaves the backlog after its handler returns.
	rec.waitFor(t, 20*time.Second, "an empty backlog", func() bool { return queuetest.Stored(t, ctx, b.JS, backlog) == 0 })
}

// ran reports whether the handler ran job id.
func (r *recorder) ran(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.starts[id]) > 0
}
