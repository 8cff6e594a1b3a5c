package jobstatus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// statusWrites is how many writes the job status buckets took: each write
// is a message of its bucket's stream, so the streams' last sequences add
// up to them, whatever expired or was overwritten since.
func statusWrites(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	var n uint64
	for i := range queue.KVShards {
		s, err := js.Stream(t.Context(), "KV_"+queue.ShardBucket(jobstatus.Bucket, i))
		if err != nil {
			t.Fatal(err)
		}
		n += s.CachedInfo().State.LastSeq
	}
	return n
}

// Writes per job, counted on a real worker: the admitter's first record
// and the worker's outcome — two writes for a job admitted at once; a
// backlog job's start is written too (the write a cancel races). With
// running records asked for (status.record_running), every try's start is
// one more.
func TestWritesPerJob(t *testing.T) {
	t.Parallel()
	modes := []bool{false}
	if buckettest.ReliabilityFull() {
		modes = append(modes, true) // the figures from before: a running record per try
	}
	for _, running := range modes {
		for _, to := range []queue.Destination{queue.Ready, queue.Backlog} {
			writes := writesPerJob(t, to, running)
			t.Logf("figure: status writes per job, %s, record_running %v: %.2f", to, running, writes)
			want := 2.0
			if to == queue.Backlog || running {
				want = 3
			}
			if writes > want {
				t.Errorf("%s, record_running %v: %.2f writes per job, want at most %v", to, running, writes, want)
			}
		}
	}
}

func writesPerJob(t *testing.T, to queue.Destination, running bool) float64 {
	const jobs = 20
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	store, err := jobstatus.Open(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := queue.Config{Name: "email", Memory: true, LeakRate: bucket.Rate{Count: 100, Per: time.Second}}
	if err := queue.EnsureStreams(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, jobs)
	for i := range ids {
		j := job(t)
		j.EnqueuedAt = time.Now()
		at, err := pub.Publish(t.Context(), to, j)
		if err != nil {
			t.Fatal(err)
		}
		first := jobstatus.Record{ID: j.ID, Queue: j.Queue, State: jobstatus.Admitted}
		if to == queue.Backlog {
			first.State, first.BacklogSeq = jobstatus.Queued, at.Sequence
		}
		if err := store.Create(t.Context(), first); err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	rec := jobstatus.NewRecorder(store, nil, 0)
	rec.SetRecordRunning(running)
	stopRecorder := run(t, rec)
	w, err := queue.NewWorker(js, queue.WorkerConfig{Queue: cfg, FetchWait: 50 * time.Millisecond, Observe: rec.Observe, StartGate: rec.StartGate},
		func(context.Context, *queue.Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for _, id := range ids {
		waitFor(t, store, id, "succeeded", func(r jobstatus.Record) bool { return r.State == jobstatus.Succeeded })
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker Run: %v", err)
	}
	stopRecorder()
	return float64(statusWrites(t, js)) / jobs
}
