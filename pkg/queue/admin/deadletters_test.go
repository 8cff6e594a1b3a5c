package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// deadFixture is a queue whose DEAD stream holds dead letters written as a
// worker writes them.
type deadFixture struct {
	js  jetstream.JetStream
	cfg queue.Config
}

func newDeadFixture(t *testing.T, cfg queue.Config) *deadFixture {
	t.Helper()
	js := queuetest.Start(t).JetStream(t)
	cfg.Memory = true
	if err := queue.EnsureStreams(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	return &deadFixture{js: js, cfg: cfg}
}

// bury stores a dead letter of job id (empty: a message that is not a
// job) and returns its DEAD sequence.
func (f *deadFixture) bury(t *testing.T, id, key string) uint64 {
	t.Helper()
	m := nats.NewMsg(queue.Subject(f.cfg.Name, queue.Dead, key))
	if id != "" {
		m.Header.Set(spillway.HeaderJobID, id)
	}
	m.Header.Set(spillway.HeaderQueue, f.cfg.Name)
	m.Header.Set(spillway.HeaderKey, key)
	m.Header.Set(spillway.HeaderCost, "1")
	m.Header.Set(queue.HeaderEnqueuedAt, time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set(spillway.HeaderNotBefore, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	m.Header.Set(spillway.HeaderAttempt, "3")
	m.Header.Set(queue.HeaderDeadReason, "attempts exhausted (3 of 3)")
	m.Header.Set(queue.HeaderLastError, "boom "+id)
	m.Header.Set(queue.HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set(queue.HeaderSourceStream, queue.StreamName(f.cfg.Name, queue.Ready))
	m.Header.Set(queue.HeaderSourceSeq, "17")
	m.Header.Set("Traceparent", "00-trace-"+id)
	m.Data = []byte("payload " + id)
	ack, err := f.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func (f *deadFixture) open(t *testing.T) *admin.DeadLetters {
	t.Helper()
	dl, err := admin.OpenDeadLetters(t.Context(), f.js, f.cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

func (f *deadFixture) count(t *testing.T, d queue.Destination) uint64 {
	t.Helper()
	s, err := f.js.Stream(t.Context(), queue.StreamName(f.cfg.Name, d))
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

func seqs(ls []admin.DeadLetter) []uint64 {
	var s []uint64
	for _, l := range ls {
		s = append(s, l.Seq)
	}
	return s
}

func TestDeadLettersList(t *testing.T) {
	t.Parallel()
	f := newDeadFixture(t, queue.Config{Name: "mail"})
	if _, err := admin.OpenDeadLetters(t.Context(), f.js, "nope"); !errors.Is(err, admin.ErrNoStream) {
		t.Fatalf("open of a queue without streams: %v, want ErrNoStream", err)
	}
	for i := range 5 {
		f.bury(t, "job-"+strconv.Itoa(i%3), "k")
	}
	dl := f.open(t)
	f.bury(t, "job-late", "k") // after the open: not seen
	if dl.Total() != 5 || dl.Stream() != "SPILLWAY_mail_DEAD" || dl.Queue() != "mail" {
		t.Fatalf("total %d stream %s queue %s", dl.Total(), dl.Stream(), dl.Queue())
	}
	for _, c := range []struct {
		o    admin.ListOptions
		want string
	}{
		{admin.ListOptions{}, "[1 2 3 4 5]"},
		{admin.ListOptions{Limit: 2}, "[1 2]"},
		{admin.ListOptions{After: 2, Limit: 2}, "[3 4]"},
		{admin.ListOptions{After: 4}, "[5]"},
		{admin.ListOptions{After: 5}, "[]"},
		{admin.ListOptions{JobID: "job-1"}, "[2 5]"},
		{admin.ListOptions{JobID: "job-1", Limit: 1}, "[2]"},
		{admin.ListOptions{JobID: "job-1", After: 2}, "[5]"},
		{admin.ListOptions{JobID: "job-late"}, "[]"},
	} {
		ls, err := dl.List(t.Context(), c.o)
		if got := fmt.Sprint(seqs(ls)); err != nil || got != c.want {
			t.Errorf("List(%+v): %s %v, want %s", c.o, got, err, c.want)
		}
	}
	if _, err := dl.List(t.Context(), admin.ListOptions{Limit: -1}); err == nil || !strings.Contains(err.Error(), "limit -1") {
		t.Errorf("negative limit: %v", err)
	}
	ls, err := dl.List(t.Context(), admin.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := ls[0]
	if l.ID != "job-0" || l.Attempts != 3 || l.Reason != "attempts exhausted (3 of 3)" || l.LastError != "boom job-0" ||
		l.SourceStream != "SPILLWAY_mail_READY" || l.SourceSeq != 17 || l.PayloadBytes != len("payload job-0") ||
		l.DeadAt.IsZero() || l.EnqueuedAt.IsZero() {
		t.Fatalf("dead letter %+v", l)
	}
}

func TestDeadLettersReplay(t *testing.T) {
	t.Parallel()
	f := newDeadFixture(t, queue.Config{Name: "mail", Capacity: 1})
	a := f.bury(t, "job-a", "k1")
	b := f.bury(t, "job-b", "k2")
	notJob := f.bury(t, "", "k3")
	dl := f.open(t)
	letters, err := dl.List(t.Context(), admin.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A destination that does not exist: nothing is tried.
	if _, err := dl.Replay(t.Context(), letters, admin.ReplayOptions{To: queue.Dead}); err == nil {
		t.Fatal("replay to DEAD accepted")
	}

	// To the backlog, which holds one job: the first goes, the second is
	// kept (the backlog is full), the third is not a job. Prepare is
	// undone for the one kept.
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var prepared, undone, reported []string
	res, err := dl.Replay(t.Context(), letters, admin.ReplayOptions{
		To: queue.Backlog, Now: func() time.Time { return now },
		Prepare: func(_ context.Context, j queue.Job, _ admin.DeadLetter, to queue.Destination, _ time.Time) (func(), string) {
			prepared = append(prepared, j.ID+"→"+to.String())
			return func() { undone = append(undone, j.ID) }, "noted"
		},
		Report: func(r admin.ReplayResult) { reported = append(reported, r.ID) },
	})
	if err != nil || len(res) != 3 || len(reported) != 3 {
		t.Fatalf("replay: %v, %d results, %d reported", err, len(res), len(reported))
	}
	if r := res[0]; r.Kept != "" || r.Stream != "SPILLWAY_mail_BACKLOG" || r.Seq == 0 || r.DeadSeq != a || r.Note != "noted" {
		t.Errorf("first: %+v", r)
	}
	if r := res[1]; r.DeadSeq != b || !strings.Contains(r.Kept, "the backlog is full") || r.Stream != "" {
		t.Errorf("second, to a full backlog: %+v", r)
	}
	if r := res[2]; r.DeadSeq != notJob || !strings.Contains(r.Kept, "not a job") {
		t.Errorf("third, not a job: %+v", r)
	}
	if fmt.Sprint(prepared) != "[job-a→backlog job-b→backlog]" || fmt.Sprint(undone) != "[job-b]" {
		t.Errorf("prepared %v, undone %v", prepared, undone)
	}
	if f.count(t, queue.Dead) != 2 || f.count(t, queue.Backlog) != 1 {
		t.Fatalf("after replay: DEAD %d, BACKLOG %d; want 2 and 1", f.count(t, queue.Dead), f.count(t, queue.Backlog))
	}
	s, err := f.js.Stream(t.Context(), queue.StreamName("mail", queue.Backlog))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(t.Context(), res[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Header
	if m.Subject != queue.Subject("mail", queue.Backlog, "k1") || h.Get(nats.MsgIdHdr) != fmt.Sprintf("job-a:replay:%d", a) ||
		h.Get(spillway.HeaderAttempt) != "0" || h.Get(spillway.HeaderNotBefore) != "" || h.Get(queue.HeaderEnqueuedAt) != now.Format(time.RFC3339Nano) ||
		h.Get(queue.HeaderDeadReason) != "" || h.Get(queue.HeaderSourceSeq) != "" || h.Get("Traceparent") != "00-trace-job-a" ||
		string(m.Data) != "payload job-a" {
		t.Fatalf("replayed message on %s: %v %q", m.Subject, h, m.Data)
	}
	j, err := queue.ParseJob(h, m.Data)
	if err != nil || j.ID != "job-a" || j.Attempt != 0 {
		t.Fatalf("replayed job %+v %v", j, err)
	}

	// The one kept, to READY: it goes. The same dead letter replayed
	// again (by someone who listed it before) is gone meanwhile.
	rest := letters[1:2]
	res, err = dl.Replay(t.Context(), rest, admin.ReplayOptions{To: queue.Ready})
	if err != nil || res[0].Kept != "" || res[0].Stream != "SPILLWAY_mail_READY" {
		t.Fatalf("replay to READY: %v %+v", err, res)
	}
	res, err = dl.Replay(t.Context(), rest, admin.ReplayOptions{To: queue.Ready})
	if err != nil || !strings.Contains(res[0].Kept, "gone meanwhile") || f.count(t, queue.Ready) != 1 {
		t.Fatalf("second replay of one dead letter: %v %+v, READY %d", err, res, f.count(t, queue.Ready))
	}

	// READY gone: an error before anything, the dead letter stays.
	if err := f.js.DeleteStream(t.Context(), queue.StreamName("mail", queue.Ready)); err != nil {
		t.Fatal(err)
	}
	res, err = dl.Replay(t.Context(), letters[2:], admin.ReplayOptions{To: queue.Ready})
	if !errors.Is(err, admin.ErrNoStream) || len(res) != 0 || f.count(t, queue.Dead) != 1 {
		t.Fatalf("replay without READY: %v %+v", err, res)
	}
}

func TestDeadLettersReplayToFullReady(t *testing.T) {
	t.Parallel()
	f := newDeadFixture(t, queue.Config{Name: "mail", ReadyCapacity: 1})
	f.bury(t, "job-a", "k")
	f.bury(t, "job-b", "k")
	dl := f.open(t)
	letters, err := dl.List(t.Context(), admin.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := dl.Replay(t.Context(), letters, admin.ReplayOptions{To: queue.Ready})
	if err != nil || res[0].Kept != "" || !strings.Contains(res[1].Kept, "READY is full") {
		t.Fatalf("replay to a READY with room for one: %v %+v", err, res)
	}
	if f.count(t, queue.Dead) != 1 || f.count(t, queue.Ready) != 1 {
		t.Fatalf("DEAD %d, READY %d; want 1 and 1", f.count(t, queue.Dead), f.count(t, queue.Ready))
	}
}

func TestDeadLettersPurge(t *testing.T) {
	t.Parallel()
	f := newDeadFixture(t, queue.Config{Name: "mail"})
	for i := range 4 {
		f.bury(t, "job-"+strconv.Itoa(i), "k")
	}
	dl := f.open(t)
	if n, err := dl.Purge(t.Context(), []uint64{2, 3, 3}); err != nil || n != 3 {
		t.Fatalf("purge 2, 3, 3: %d %v", n, err)
	}
	if ls, _ := dl.List(t.Context(), admin.ListOptions{}); fmt.Sprint(seqs(ls)) != "[1 4]" {
		t.Fatalf("after purging 2 and 3: %v", seqs(ls))
	}
	late := f.bury(t, "job-late", "k") // after the open: kept by PurgeAll
	if n, err := dl.PurgeAll(t.Context()); err != nil || n != 4 {
		t.Fatalf("purge all: %d %v (counts the dead letters there were when opened)", n, err)
	}
	ls, err := f.open(t).List(t.Context(), admin.ListOptions{})
	if err != nil || fmt.Sprint(seqs(ls)) != fmt.Sprint([]uint64{late}) {
		t.Fatalf("after purge all: %v %v, want only the late one", seqs(ls), err)
	}
	if n, err := newDeadFixture(t, queue.Config{Name: "empty"}).open(t).PurgeAll(t.Context()); err != nil || n != 0 {
		t.Fatalf("purge all of nothing: %d %v", n, err)
	}
}
