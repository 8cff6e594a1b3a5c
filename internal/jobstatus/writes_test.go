package jobstatus_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
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

// statusReads counts the reads of the job status buckets from now on: a
// key-value Get is a direct get, or a stream message get, on the bucket's
// stream, and a subscriber of those API subjects sees each request.
func statusReads(t *testing.T, url string) *atomic.Int64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	for _, subject := range []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"} {
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
			if strings.Contains(m.Subject, ".KV_"+jobstatus.Bucket+"-") {
				n.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// Writes and reads per job on the worker, counted on a real worker: a job
// admitted at once has no first record (its READY message is its status)
// and costs the worker's outcome alone, one write, made before its ack; a
// queued job costs the admitter's first record, its start claim (what a
// cancel races) and its outcome, three; and no read: nothing on the
// worker's path reads a record to write it. The queued jobs of a batch
// share their first records: one write per 64 jobs. With running records
// asked for (status.record_running), every admitted job's start is one
// more write, merged into the record (a read).
func TestWritesPerJob(t *testing.T) {
	t.Parallel()
	modes := []bool{false}
	if buckettest.ReliabilityFull() {
		modes = append(modes, true) // the figures from before: a running record per try
	}
	for _, running := range modes {
		for _, to := range []queue.Destination{queue.Ready, queue.Backlog} {
			for _, batch := range []bool{false, true} {
				writes, reads := writesPerJob(t, to, running, batch)
				t.Logf("figure: status writes per job, %s, batch %v, record_running %v: %.2f; reads on the worker %.2f", to, batch, running, writes, reads)
				want := 1.0 // the outcome
				switch {
				case to == queue.Backlog && batch:
					want += 1.0/writesJobs + 1 // one first record for all, the start
				case to == queue.Backlog:
					want += 2 // the first record, the start
				case running:
					want++ // the start
				}
				if writes > want+1e-9 {
					t.Errorf("%s, batch %v, record_running %v: %.2f writes per job, want at most %.2f", to, batch, running, writes, want)
				}
				// A running record asked for is merged into what is there (a
				// read and a conditional write) for an admitted job: not the
				// default path.
				if !running && reads != 0 {
					t.Errorf("%s, batch %v, record_running %v: the worker read the status records %.2f times per job, want 0", to, batch, running, reads)
				}
			}
		}
	}
}

// writesJobs is how many jobs writesPerJob runs.
const writesJobs = 20

func writesPerJob(t *testing.T, to queue.Destination, running, batch bool) (writes, reads float64) {
	const jobs = writesJobs
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
	if batch {
		if ids, err = queue.NewJobIDs("email", jobs); err != nil {
			t.Fatal(err)
		}
	}
	var firsts []jobstatus.Record // a batch's, written together
	for i := range ids {
		j := job(t)
		if batch {
			j.ID = ids[i]
		}
		j.EnqueuedAt = time.Now()
		at, err := pub.Publish(t.Context(), to, j)
		if err != nil {
			t.Fatal(err)
		}
		first := jobstatus.Record{ID: j.ID, Queue: j.Queue, State: spillway.StateAdmitted, EnqueuedAt: j.EnqueuedAt, UpdatedAt: j.EnqueuedAt}
		if to == queue.Backlog {
			first.State, first.BacklogSeq = spillway.StateQueued, at.Sequence
		}
		ids[i] = j.ID
		if to == queue.Ready {
			continue // an admitted job has no first record: READY holds its status
		}
		if batch {
			firsts = append(firsts, first)
			continue
		}
		if err := store.Create(t.Context(), first); err != nil {
			t.Fatal(err)
		}
	}
	if len(firsts) > 0 {
		msgs, err := jobstatus.FirstMsgs(firsts)
		if err != nil {
			t.Fatal(err)
		}
		publishAll(t, js, msgs)
	}
	read := statusReads(t, srv.URL())
	rec := jobstatus.NewRecorder(store, nil, 0)
	rec.SetRecordRunning(running)
	stopRecorder := run(t, rec)
	var succeeded atomic.Int64 // counted from the events, so that waiting reads no record
	observe := func(e worker.Event) {
		rec.Observe(e)
		if e.Kind == worker.Succeeded {
			succeeded.Add(1)
		}
	}
	w, err := worker.NewWorker(js, worker.WorkerConfig{Queue: cfg, FetchWait: 50 * time.Millisecond, Observe: observe, StartGate: rec.StartGate, Outcome: rec.Outcome},
		func(context.Context, *queue.Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for succeeded.Load() < jobs {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs succeeded after 20s", succeeded.Load(), jobs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker Run: %v", err)
	}
	stopRecorder()
	workerReads := read.Load()
	for _, id := range ids {
		if r, err := store.Get(t.Context(), id); err != nil || r.State != spillway.StateSucceeded {
			t.Errorf("job %s: record %+v, %v; want succeeded", id, r, err)
		}
	}
	return float64(statusWrites(t, js)) / jobs, float64(workerReads) / jobs
}
