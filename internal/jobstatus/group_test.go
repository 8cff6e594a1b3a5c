package jobstatus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// firstRecords are the admitter's first records of a batch of n jobs:
// every third queued (at backlog sequence 100+i, not before a minute
// later), the others admitted, except the jobs skip leaves out (refused).
func firstRecords(t *testing.T, n int, skip func(i int) bool) []jobstatus.Record {
	t.Helper()
	recs, _ := batchRecords(t, n, skip)
	return recs
}

// batchRecords is firstRecords with the batch's ids, refused ones too.
func batchRecords(t *testing.T, n int, skip func(i int) bool) (recs []jobstatus.Record, ids []string) {
	t.Helper()
	ids, err := queue.NewJobIDs("email", n)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if skip(i) {
			continue
		}
		at := t0.Add(time.Duration(i) * time.Microsecond)
		rec := jobstatus.Record{ID: id, Queue: "email", State: spillway.StateAdmitted, EnqueuedAt: at, UpdatedAt: at, Submitter: "sha256:0123456789ab"}
		if i%3 == 0 {
			rec.State, rec.NotBefore, rec.BacklogSeq = spillway.StateQueued, at.Add(time.Minute), uint64(100+i)
		}
		recs = append(recs, rec)
	}
	return recs, ids
}

// publishAll stores msgs and returns how many there were.
func publishAll(t *testing.T, js jetstream.JetStream, msgs []*nats.Msg) int {
	t.Helper()
	for _, m := range msgs {
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatalf("publishing %s: %v", m.Subject, err)
		}
	}
	return len(msgs)
}

// openJS is open with its JetStream, for writes of the admitter's.
func openJS(t *testing.T) (*jobstatus.Store, jetstream.JetStream) {
	t.Helper()
	js := queuetest.Start(t).JetStream(t)
	s, err := jobstatus.Open(t.Context(), js, 0, 1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, js
}

func TestBatchFirstRecordsShareWrites(t *testing.T) {
	t.Parallel()
	s, js := openJS(t)
	ctx := t.Context()
	// 1000 jobs, the 8th of each 64 refused (rejected: no record): 16
	// groups of 64 ids, the last of 40.
	const n = 1000
	refused := func(i int) bool { return i%64 == 7 }
	recs, ids := batchRecords(t, n, refused)
	msgs, err := jobstatus.FirstMsgs(recs)
	if err != nil {
		t.Fatal(err)
	}
	if got := publishAll(t, js, msgs); got != 16 {
		t.Errorf("%d jobs in %d messages, want 16 (one per 64 ids)", len(recs), got)
	}
	// A group is written once: a second write, which would replace its
	// entries, is refused.
	again := nats.NewMsg(msgs[0].Subject)
	again.Header, again.Data = msgs[0].Header, []byte(`{"queue":"email","jobs":[]}`)
	if _, err := js.PublishMsg(ctx, again); err == nil {
		t.Errorf("a second write of group record %s was stored", msgs[0].Subject)
	}
	stored := 0
	for _, m := range msgs {
		stored += jobstatus.RecordsIn(m)
	}
	if stored != len(recs) {
		t.Errorf("the messages hold %d records, want %d", stored, len(recs))
	}
	for _, want := range recs {
		got, err := s.Get(ctx, want.ID)
		if err != nil || got != want {
			t.Fatalf("Get %s:\n%+v %v\nwant\n%+v", want.ID, got, err, want)
		}
	}
	// Not found: a refused job of the batch (in a written group, with no
	// entry), a job of a batch never written, a single job.
	other := firstRecords(t, 8, func(int) bool { return false })
	for _, id := range []string{ids[7], ids[15*64+7], other[0].ID, newID(t)} {
		if _, err := s.Get(ctx, id); !errors.Is(err, jobstatus.ErrNotFound) {
			t.Errorf("Get of an unwritten job %s: %v, want ErrNotFound", id, err)
		}
	}

	// A worker's record takes precedence; it keeps what the first said.
	admitted := recs[1]
	if admitted.State != spillway.StateAdmitted {
		t.Fatalf("job 1 is %s", admitted.State)
	}
	got, ok, err := s.Advance(ctx, jobstatus.Record{ID: admitted.ID, State: spillway.StateRunning, Attempts: 1, StartedAt: t0.Add(time.Second)})
	if err != nil || !ok || got.State != spillway.StateRunning || got.Queue != "email" || !got.EnqueuedAt.Equal(admitted.EnqueuedAt) {
		t.Errorf("Advance over a group record: %+v %v %v; want running, queue and enqueue time kept", got, ok, err)
	}
	if got, err := s.Get(ctx, admitted.ID); err != nil || got.State != spillway.StateRunning {
		t.Errorf("Get after Advance: %+v %v, want running", got, err)
	}

	// A queued job of the batch: cancelled, never started.
	queued := recs[0]
	j := &queue.Job{ID: queued.ID, Queue: queued.Queue, EnqueuedAt: queued.EnqueuedAt}
	c, err := s.Cancel(ctx, queued.ID)
	if err != nil || c.State != spillway.StateCancelled || c.BacklogSeq != queued.BacklogSeq {
		t.Fatalf("Cancel of a queued batch job: %+v %v; want cancelled at backlog seq %d", c, err, queued.BacklogSeq)
	}
	if got, err := s.Get(ctx, queued.ID); err != nil || got.State != spillway.StateCancelled {
		t.Errorf("Get after Cancel: %+v %v, want cancelled", got, err)
	}
	if err := s.StartGate(ctx, started(j)); !errors.Is(err, worker.ErrJobCancelled) {
		t.Errorf("StartGate of the cancelled batch job: %v, want ErrJobCancelled", err)
	}
	var nc *jobstatus.NotCancellableError
	if _, err := s.Cancel(ctx, recs[2].ID); !errors.As(err, &nc) || nc.Record.State != spillway.StateAdmitted {
		t.Errorf("Cancel of an admitted batch job: %v, want NotCancellableError, admitted", err)
	}

	// A queued job that started first cannot be cancelled.
	queued = recs[3]
	if queued.State != spillway.StateQueued {
		t.Fatalf("job 3 is %s", queued.State)
	}
	if err := s.StartGate(ctx, started(&queue.Job{ID: queued.ID, Queue: queued.Queue, EnqueuedAt: queued.EnqueuedAt})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, queued.ID); !errors.As(err, &nc) || nc.Record.State != spillway.StateRunning {
		t.Errorf("Cancel of a started batch job: %v, want NotCancellableError, running", err)
	}
}

func TestFirstMsgsWritesAloneWhatAGroupCannotHold(t *testing.T) {
	t.Parallel()
	// Two jobs of a group are one group record.
	recs := firstRecords(t, 2, func(int) bool { return false })
	msgs, err := jobstatus.FirstMsgs(recs)
	if err != nil || len(msgs) != 1 || !strings.HasSuffix(msgs[0].Subject, ".first") {
		t.Fatalf("FirstMsgs of 2 jobs of a group: %d messages %v; want one group record", len(msgs), err)
	}
	alone := func(name string, recs []jobstatus.Record) {
		t.Helper()
		msgs, err := jobstatus.FirstMsgs(recs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(msgs) != len(recs) {
			t.Fatalf("%s: %d messages for %d records, want one each", name, len(msgs), len(recs))
		}
		for i, m := range msgs {
			if want := "." + recs[i].ID; !strings.HasSuffix(m.Subject, want) || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "0" {
				t.Errorf("%s: message %d to %s (expected last %q), want a Create of %s", name, i, m.Subject, m.Header.Get(jetstream.ExpectedLastSubjSeqHeader), recs[i].ID)
			}
		}
	}
	alone("one job", recs[:1])
	alone("two singles", []jobstatus.Record{{ID: newID(t), Queue: "email", State: spillway.StateAdmitted, EnqueuedAt: t0, UpdatedAt: t0},
		{ID: newID(t), Queue: "email", State: spillway.StateAdmitted, EnqueuedAt: t0, UpdatedAt: t0}})
	mixed := firstRecords(t, 2, func(int) bool { return false })
	mixed[1].Queue = "sms"
	alone("two queues", mixed)
	running := firstRecords(t, 2, func(int) bool { return false })
	running[1].State, running[1].Attempts = spillway.StateRunning, 1
	alone("a running record", running)

	// 64 queued jobs with every field at its longest fit one record.
	long := firstRecords(t, 64, func(int) bool { return false })
	for i := range long {
		long[i].Queue = strings.Repeat("q", 64)
		long[i].State, long[i].NotBefore, long[i].BacklogSeq = spillway.StateQueued, long[i].EnqueuedAt.Add(time.Hour), 1<<64-1
	}
	msgs, err = jobstatus.FirstMsgs(long)
	if err != nil || len(msgs) != 1 || jobstatus.RecordsIn(msgs[0]) != 64 {
		t.Errorf("64 queued jobs: %d messages %v, want one group record", len(msgs), err)
	} else {
		t.Logf("64 queued jobs, every field at its longest: %d bytes", len(msgs[0].Data))
	}

	bad := firstRecords(t, 2, func(int) bool { return false })
	bad[1].State = "lost"
	if _, err := jobstatus.FirstMsgs(bad); err == nil {
		t.Error("FirstMsgs of an invalid record: no error")
	}
}

// A job with no record of its own but a deleted one (a delete marker on
// its key, as `nats kv del` leaves) and its group's entry: a merge and a
// cancel write its own record over the marker.
func TestGroupEntryOverADeletedRecord(t *testing.T) {
	t.Parallel()
	s, js := openJS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	recs := firstRecords(t, 4, func(int) bool { return false })
	msgs, err := jobstatus.FirstMsgs(recs)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, js, msgs)
	for _, rec := range recs {
		kv, err := js.KeyValue(ctx, jobstatus.BucketOf(rec.ID))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, rec.ID, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
	}
	admitted, queued := recs[1], recs[0]
	got, ok, err := s.Advance(ctx, jobstatus.Record{ID: admitted.ID, State: spillway.StateSucceeded, Attempts: 1})
	if err != nil || !ok || got.State != spillway.StateSucceeded || !got.EnqueuedAt.Equal(admitted.EnqueuedAt) {
		t.Errorf("Advance: %+v %v %v; want succeeded, the enqueue time kept", got, ok, err)
	}
	if c, err := s.Cancel(ctx, queued.ID); err != nil || c.State != spillway.StateCancelled {
		t.Errorf("Cancel: %+v %v; want cancelled", c, err)
	}
	for _, want := range []jobstatus.Record{{ID: admitted.ID, State: spillway.StateSucceeded}, {ID: queued.ID, State: spillway.StateCancelled}} {
		if got, err := s.Get(ctx, want.ID); err != nil || got.State != want.State {
			t.Errorf("Get %s: %+v %v, want %s", want.ID, got, err, want.State)
		}
	}
}
