package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// dlqBundle is a JetStream server with one queue's streams.
type dlqBundle struct {
	srv *queuetest.Server
	js  jetstream.JetStream
	cfg queue.Config
	pub *queue.Publisher
	// observe, if set, also sees the workers' events.
	observe func(worker.Event)
}

func setupDLQ(t *testing.T, capacity int64, dupWindow time.Duration) *dlqBundle {
	t.Helper()
	b := &dlqBundle{srv: queuetest.Start(t)}
	b.js = b.srv.JetStream(t)
	b.cfg = queue.Config{
		Name: "email", Capacity: capacity, Memory: true, DuplicateWindow: dupWindow,
		LeakRate: bucket.Rate{Count: 100, Per: time.Second},
	}
	if err := queue.EnsureStreams(t.Context(), b.js, b.cfg); err != nil {
		t.Fatal(err)
	}
	var err error
	if b.pub, err = queue.NewPublisher(b.js, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// newJob is a job of the bundle's queue with a payload and a trace header.
func (b *dlqBundle) newJob(t *testing.T, i int) *queue.Job {
	t.Helper()
	id, err := queue.NewJobID("email")
	if err != nil {
		t.Fatal(err)
	}
	return &queue.Job{
		ID: id, Queue: b.cfg.Name, Key: fmt.Sprintf("tenant-%d", i%2), Cost: 1, EnqueuedAt: time.Now(),
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
		Header:  nats.Header{"Traceparent": {fmt.Sprintf("00-%032d-%016d-01", i, i)}},
	}
}

// work runs a real worker on the queue with h until want events of kind
// happened, then stops it.
func (b *dlqBundle) work(t *testing.T, kind worker.EventKind, want int, h worker.Handler) {
	t.Helper()
	events := make(chan worker.Event, 100)
	policy := retry.Policy{MaxAttempts: 2, Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	w, err := worker.NewWorker(b.js, worker.WorkerConfig{Queue: b.cfg, Concurrency: 4, Retry: policy, Observe: func(e worker.Event) {
		if b.observe != nil {
			b.observe(e)
		}
		if e.Kind == kind {
			events <- e
		}
	}}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.After(20 * time.Second)
	for n := 0; n < want; {
		select {
		case <-events:
			n++
		case <-deadline:
			cancel()
			t.Fatalf("after 20s, %d of %d %v events", n, want, kind)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("worker: %v", err)
	}
}

// withStatus makes the bundle's workers keep job status records, as the
// worker binary does, and returns the store.
func (b *dlqBundle) withStatus(t *testing.T) *jobstatus.Store {
	t.Helper()
	st, err := jobstatus.Open(t.Context(), b.js, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := jobstatus.NewRecorder(st, nil, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("recorder: %v", err)
		}
	})
	b.observe = rec.Observe
	return st
}

// waitStatus polls job id's record until it is in state, failing after
// 10s (the recorder writes asynchronously).
func waitStatus(t *testing.T, st *jobstatus.Store, id string, state spillway.State) jobstatus.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := st.Get(t.Context(), id)
		if err == nil && rec.State == state {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: not %s after 10s: %+v %v", id, state, rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill publishes n jobs to READY and lets a worker fail each twice, its
// last try: they end in DEAD exactly as the worker writes dead letters.
func (b *dlqBundle) kill(t *testing.T, n int) []*queue.Job {
	t.Helper()
	var jobs []*queue.Job
	for i := range n {
		j := b.newJob(t, i)
		if _, err := b.pub.Publish(t.Context(), queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	b.work(t, worker.DeadLettered, n, func(_ context.Context, j *queue.Job) error {
		return fmt.Errorf("smtp: 550 mailbox %s unavailable", j.Key)
	})
	return jobs
}

// count is how many messages a stream of the queue holds.
func (b *dlqBundle) count(t *testing.T, d queue.Destination) uint64 {
	t.Helper()
	s, err := b.js.Stream(t.Context(), queue.StreamName(b.cfg.Name, d))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// spill runs "spillctl dlq args..." with the clock shifted by shift, and
// stdin answering confirmations if tty.
type dlqRun struct {
	shift time.Duration
	stdin string
	tty   bool
}

func (b *dlqBundle) spill(t *testing.T, r dlqRun, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	d := &dlq{
		getenv: func(k string) string {
			if k == "SPILLWAY_NATS_URL" {
				return b.srv.URL()
			}
			return ""
		},
		stdin: strings.NewReader(r.stdin), stdout: &out, stderr: &errb,
		now:         func() time.Time { return time.Now().Add(r.shift) },
		interactive: func(io.Reader) bool { return r.tty },
	}
	err := d.run(t.Context(), args)
	return out.String(), errb.String(), err
}

// later is a clock past the streams' 2m duplicate windows.
var later = dlqRun{shift: 3 * time.Minute}

func TestDLQList(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	out, _, err := b.spill(t, dlqRun{}, "list", "--queue", "email")
	if err != nil || !strings.Contains(out, "SPILLWAY_email_DEAD: no dead letters") {
		t.Fatalf("empty list: %v\n%s", err, out)
	}
	jobs := b.kill(t, 3)

	out, _, err = b.spill(t, dlqRun{}, "list", "--queue", "email")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SPILLWAY_email_DEAD: 3 dead letters", "SEQ", "ATTEMPTS", "LAST ERROR", "attempts exhausted (2 of 2)", "smtp: 550 mailbox tenant-0 unavailable", jobs[2].ID} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}

	out, _, err = b.spill(t, dlqRun{}, "list", "--queue", "email", "--json", "--limit", "2")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Stream      string       `json:"stream"`
		Total       int          `json:"total"`
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if got.Total != 3 || len(got.DeadLetters) != 2 || got.Stream != "SPILLWAY_email_DEAD" {
		t.Fatalf("--json --limit 2: %+v", got)
	}
	l := got.DeadLetters[0]
	if l.Attempts != 2 || l.Reason != "attempts exhausted (2 of 2)" || l.SourceStream != "SPILLWAY_email_READY" ||
		l.PayloadBytes != len(`{"n":0}`) || l.DeadAt.IsZero() || l.EnqueuedAt == nil || l.Seq == 0 {
		t.Fatalf("dead letter %+v", l)
	}
	ids := map[string]bool{jobs[0].ID: true, jobs[1].ID: true, jobs[2].ID: true}
	if !ids[got.DeadLetters[0].ID] || !ids[got.DeadLetters[1].ID] {
		t.Fatalf("ids %s %s are not the jobs'", got.DeadLetters[0].ID, got.DeadLetters[1].ID)
	}
	if out, _, _ := b.spill(t, dlqRun{}, "list", "--queue", "email", "--limit", "1"); !strings.Contains(out, "the oldest 1 shown") {
		t.Errorf("--limit 1 does not say more exist:\n%s", out)
	}
}

// A replayed job is in READY under its own id with a new message id and
// attempts reset, its dead letter is gone, and a worker runs it.
func TestDLQReplayToReady(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	st := b.withStatus(t)
	jobs := b.kill(t, 2)
	byID := map[string]*queue.Job{jobs[0].ID: jobs[0], jobs[1].ID: jobs[1]}
	waitStatus(t, st, jobs[0].ID, spillway.StateDead)

	out, _, err := b.spill(t, later, "replay", "--queue", "email", "--id", jobs[0].ID, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep struct {
		Results []replayed `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Results) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	r := rep.Results[0]
	if r.Kept != "" || r.Warning != "" || r.Stream != "SPILLWAY_email_READY" || r.ID != jobs[0].ID {
		t.Fatalf("result %+v", r)
	}
	if n := b.count(t, queue.Dead); n != 1 {
		t.Fatalf("%d dead letters after replaying one of 2", n)
	}
	// Its status starts over: a worker only advances a record, and its
	// first try is behind the dead record's second.
	if rec, err := st.Get(t.Context(), jobs[0].ID); err != nil || rec.State != spillway.StateAdmitted || rec.Attempts != 0 || !strings.Contains(rec.LastError, "smtp: 550") {
		t.Fatalf("status after replay: %+v %v", rec, err)
	}
	ready, err := b.js.Stream(t.Context(), queue.StreamName("email", queue.Ready))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ready.GetMsg(t.Context(), r.Seq)
	if err != nil {
		t.Fatal(err)
	}
	h := msg.Header
	if h.Get(spillway.HeaderJobID) != jobs[0].ID || h.Get(nats.MsgIdHdr) != fmt.Sprintf("%s:replay:%d", jobs[0].ID, r.DeadSeq) ||
		h.Get(spillway.HeaderAttempt) != "0" || h.Get("Traceparent") != jobs[0].Header.Get("Traceparent") ||
		h.Get(queue.HeaderDeadReason) != "" || h.Get(queue.HeaderLastError) != "" || h.Get(queue.HeaderSourceSeq) != "" ||
		string(msg.Data) != string(jobs[0].Payload) || msg.Subject != queue.ReadySubject("email", jobs[0].ID) {
		t.Fatalf("replayed message on %s: %v %q", msg.Subject, h, msg.Data)
	}

	// The rest, in human form.
	out, _, err = b.spill(t, later, "replay", "--queue", "email", "--all")
	if err != nil || !strings.Contains(out, "replayed 1 of 1 dead letter to SPILLWAY_email_READY") || !strings.Contains(out, jobs[1].ID) {
		t.Fatalf("replay --all: %v\n%s", err, out)
	}
	if n := b.count(t, queue.Dead); n != 0 {
		t.Fatalf("%d dead letters after replaying all", n)
	}

	// A worker runs both again: same ids, payloads and headers, first try.
	var mu sync.Mutex
	ran := map[string]queue.Job{}
	b.work(t, worker.Succeeded, 2, func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		ran[j.ID] = *j
		mu.Unlock()
		return nil
	})
	for id, j := range ran {
		want := byID[id]
		if want == nil || string(j.Payload) != string(want.Payload) || j.Attempt != 1 || j.Key != want.Key || j.Header.Get("Traceparent") != want.Header.Get("Traceparent") {
			t.Errorf("ran %+v, want %+v on its first try", j, want)
		}
	}
	if len(ran) != 2 {
		t.Fatalf("ran %d jobs, want 2", len(ran))
	}
	for _, j := range jobs {
		if rec := waitStatus(t, st, j.ID, spillway.StateSucceeded); rec.Attempts != 1 {
			t.Errorf("status of %s after its rerun: %+v", j.ID, rec)
		}
	}
	if out, _, err := b.spill(t, later, "replay", "--queue", "email", "--all"); err != nil || !strings.Contains(out, "no dead letters to replay") {
		t.Fatalf("replay of nothing: %v %s", err, out)
	}
}

// A dead letter replayed at once (within every duplicate window) runs,
// and if it fails again it is dead-lettered again: nothing is lost.
func TestDLQReplayAtOnce(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	jobs := b.kill(t, 1)
	out, _, err := b.spill(t, dlqRun{}, "replay", "--queue", "email", "--id", jobs[0].ID)
	if err != nil || b.count(t, queue.Ready) != 1 || b.count(t, queue.Dead) != 0 {
		t.Fatalf("replay at once: %v\n%s", err, out)
	}
	b.work(t, worker.DeadLettered, 1, func(context.Context, *queue.Job) error { return errors.New("still failing") })
	if r, d := b.count(t, queue.Ready), b.count(t, queue.Dead); r != 0 || d != 1 {
		t.Fatalf("after the replayed job failed again: %d in READY, %d dead letters; want 0 and 1", r, d)
	}
}

// A job replayed to the backlog at once is drained and runs: the drain
// keys what it stores (a retry's move to READY, a dead letter) by the
// backlog place, not the job id, which READY still remembers.
func TestDLQReplayToBacklogDrains(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	jobs := b.kill(t, 1)
	out, _, err := b.spill(t, dlqRun{}, "replay", "--queue", "email", "--all", "--to", "backlog")
	if err != nil || b.count(t, queue.Backlog) != 1 || b.count(t, queue.Dead) != 0 {
		t.Fatalf("replay after the window: %v\n%s", err, out)
	}
	ran := make(chan queue.Job, 1)
	b.work(t, worker.Succeeded, 1, func(_ context.Context, j *queue.Job) error {
		ran <- *j
		return nil
	})
	if j := <-ran; j.ID != jobs[0].ID || string(j.Payload) != string(jobs[0].Payload) || j.Attempt != 1 {
		t.Fatalf("ran %+v, want job %s on its first try", j, jobs[0].ID)
	}
}

// Whenever the publish fails, the dead letter stays.
func TestDLQReplayFailureKeepsTheDeadLetter(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 1, 0)
	st := b.withStatus(t)
	jobs := b.kill(t, 2)
	waitStatus(t, st, jobs[0].ID, spillway.StateDead)

	// The backlog is full (capacity 1).
	if _, err := b.pub.Publish(t.Context(), queue.Backlog, b.newJob(t, 9)); err != nil {
		t.Fatal(err)
	}
	out, _, err := b.spill(t, later, "replay", "--queue", "email", "--all", "--to", "backlog")
	if err == nil || strings.Count(out, "the backlog is full") != 2 || !strings.Contains(out, "replayed 0 of 2") {
		t.Fatalf("replay to a full backlog: %v\n%s", err, out)
	}
	if n := b.count(t, queue.Dead); n != 2 {
		t.Fatalf("%d dead letters after failed replays, want 2", n)
	}
	for _, j := range jobs { // reset for the attempt, then put back
		if rec, err := st.Get(t.Context(), j.ID); err != nil || rec.State != spillway.StateDead || rec.Attempts != 2 {
			t.Fatalf("status after a failed replay: %+v %v", rec, err)
		}
	}

	// READY is full (ready capacity 1).
	full := b.cfg
	full.ReadyCapacity = 1
	if err := queue.EnsureStreams(t.Context(), b.js, full); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.Publish(t.Context(), queue.Ready, b.newJob(t, 8)); err != nil {
		t.Fatal(err)
	}
	out, _, err = b.spill(t, later, "replay", "--queue", "email", "--all", "--to", "ready")
	if err == nil || strings.Count(out, "READY is full") != 2 || !strings.Contains(out, "replayed 0 of 2") {
		t.Fatalf("replay to a full READY: %v\n%s", err, out)
	}
	if n := b.count(t, queue.Dead); n != 2 {
		t.Fatalf("%d dead letters after replays to a full READY, want 2", n)
	}

	// READY is gone.
	if err := b.js.DeleteStream(t.Context(), queue.StreamName("email", queue.Ready)); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.spill(t, later, "replay", "--queue", "email", "--all")
	if err == nil || !strings.Contains(err.Error(), "cannot replay to SPILLWAY_email_READY") || !strings.Contains(err.Error(), "the dead letters stay") {
		t.Fatalf("replay without READY: %v", err)
	}
	if n := b.count(t, queue.Dead); n != 2 {
		t.Fatalf("%d dead letters after a replay without READY, want 2", n)
	}
}

func TestDLQPurge(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	jobs := b.kill(t, 3)

	_, _, err := b.spill(t, dlqRun{}, "purge", "--queue", "email", "--id", jobs[0].ID)
	if err == nil || !strings.Contains(err.Error(), "stdin is not a terminal") || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("purge without a terminal: %v", err)
	}
	out, _, err := b.spill(t, dlqRun{}, "purge", "--queue", "email", "--id", jobs[0].ID, "--yes")
	if err != nil || !strings.Contains(out, "purged 1 dead letter from SPILLWAY_email_DEAD") || b.count(t, queue.Dead) != 2 {
		t.Fatalf("purge --id --yes: %v\n%s", err, out)
	}
	if _, _, err := b.spill(t, dlqRun{}, "purge", "--queue", "email", "--id", jobs[0].ID, "--yes"); err == nil || !strings.Contains(err.Error(), "no dead letter of job") {
		t.Fatalf("purge of a purged job: %v", err)
	}

	_, prompt, err := b.spill(t, dlqRun{tty: true, stdin: "n\n"}, "purge", "--queue", "email", "--all")
	if err == nil || !strings.Contains(prompt, "Purge all 2 dead letters of queue email") || b.count(t, queue.Dead) != 2 {
		t.Fatalf("purge answered no: %v, prompt %q", err, prompt)
	}
	out, _, err = b.spill(t, dlqRun{tty: true, stdin: "y\n"}, "purge", "--queue", "email", "--all", "--json")
	if err != nil || !strings.Contains(out, `"purged": 2`) || b.count(t, queue.Dead) != 0 {
		t.Fatalf("purge answered yes: %v\n%s", err, out)
	}
	// The stream itself stays, ready for new dead letters.
	if out, _, err := b.spill(t, dlqRun{}, "list", "--queue", "email"); err != nil || !strings.Contains(out, "no dead letters") {
		t.Fatalf("list after purge: %v\n%s", err, out)
	}
}

func TestDLQMistakes(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"list"}, exitUsage, "--queue is required"},
		{[]string{"list", "--queue", "a.b"}, exitUsage, "invalid queue name"},
		{[]string{"replay", "--queue", "email"}, exitUsage, "give --id ID or --all"},
		{[]string{"replay", "--queue", "email", "--id", "x", "--all"}, exitUsage, "give --id ID or --all"},
		{[]string{"replay", "--queue", "email", "--all", "--to", "dead"}, exitUsage, "want ready or backlog"},
		{[]string{"purge", "--queue", "email"}, exitUsage, "give --id ID or --all"},
		{[]string{"bury", "--queue", "email"}, exitUsage, "unknown command \"bury\""},
		{[]string{"list", "--queue", "sms"}, exitFailure, "queue \"sms\" has no dead-letter stream SPILLWAY_sms_DEAD"},
		{[]string{"replay", "--queue", "email", "--id", "nope"}, exitFailure, "no dead letter of job nope"},
		{[]string{"list", "--queue", "email", "--nats", "nats://127.0.0.1:1"}, exitFailure, "cannot reach NATS at nats://127.0.0.1:1"},
	} {
		_, _, err := b.spill(t, later, c.args...)
		code, msg := exitStatus(err)
		if err == nil || code != c.code || !strings.Contains(msg, c.says) {
			t.Errorf("dlq %v: exit %d %q, want %d and %q", c.args, code, msg, c.code, c.says)
		}
	}
	for _, args := range [][]string{{"--help"}, {"list", "--help"}, {"replay", "-h"}, {"purge", "--help"}} {
		out, _, err := b.spill(t, dlqRun{}, args...)
		if err != nil || !strings.Contains(out, "Usage: spillctl dlq") {
			t.Errorf("dlq %v: %v\n%s", args, err, out)
		}
	}
	var ee *exitError
	if _, _, err := b.spill(t, dlqRun{}); !errors.Is(err, errUsageShown) || errors.As(err, &ee) {
		t.Errorf("dlq without a command: %v", err)
	}
}

// putDead stores a dead letter as pkg/queue's worker writes one (dead.go),
// without running a worker: for tests that need many.
func (b *dlqBundle) putDead(t *testing.T, j *queue.Job, reason string) {
	t.Helper()
	m := nats.NewMsg(queue.Subject(b.cfg.Name, queue.Dead, j.Key))
	for k, vs := range j.Header {
		m.Header[k] = vs
	}
	if j.ID != "" {
		m.Header.Set(spillway.HeaderJobID, j.ID)
		m.Header.Set(nats.MsgIdHdr, j.ID)
	}
	m.Header.Set(spillway.HeaderQueue, j.Queue)
	m.Header.Set(spillway.HeaderKey, j.Key)
	m.Header.Set(spillway.HeaderCost, "1")
	m.Header.Set(queue.HeaderEnqueuedAt, j.EnqueuedAt.UTC().Format(time.RFC3339Nano))
	m.Header.Set(spillway.HeaderAttempt, "5")
	m.Header.Set(queue.HeaderDeadReason, reason)
	m.Header.Set(queue.HeaderLastError, "handler: 500 Internal Server Error")
	m.Header.Set(queue.HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set(queue.HeaderSourceStream, queue.StreamName(b.cfg.Name, queue.Ready))
	m.Header.Set(queue.HeaderSourceSeq, "1")
	m.Data = j.Payload
	if _, err := b.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

// Listing and replaying read past one fetch batch; a dead letter that is
// not a job is kept by replay, not lost.
func TestDLQManyDeadLetters(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 0, 0)
	const n = 700
	for i := range n {
		b.putDead(t, b.newJob(t, i), "attempts exhausted (5 of 5)")
	}
	b.putDead(t, &queue.Job{Queue: "email", Key: "k", EnqueuedAt: time.Now()}, "invalid job")

	out, _, err := b.spill(t, dlqRun{}, "list", "--queue", "email", "--limit", "0", "--json")
	var got struct {
		Total       int          `json:"total"`
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Total != n+1 || len(got.DeadLetters) != n+1 {
		t.Fatalf("list --limit 0: %v, total %d, listed %d", err, got.Total, len(got.DeadLetters))
	}
	for i, l := range got.DeadLetters {
		if l.Seq != uint64(i+1) {
			t.Fatalf("dead letter %d has seq %d: not in stream order", i, l.Seq)
		}
	}
	if out, _, _ := b.spill(t, dlqRun{}, "list", "--queue", "email"); !strings.Contains(out, "701 dead letters, the oldest 50 shown") {
		t.Fatalf("default limit:\n%.300s", out)
	}

	out, _, err = b.spill(t, later, "replay", "--queue", "email", "--all")
	if err == nil || !strings.Contains(out, "replayed 700 of 701") || !strings.Contains(out, "(not a job) (dead letter 701): not a job") {
		t.Fatalf("replay --all: %v\n%s", err, out[max(0, len(out)-600):])
	}
	if b.count(t, queue.Ready) != n || b.count(t, queue.Dead) != 1 {
		t.Fatalf("after replay: READY %d, DEAD %d", b.count(t, queue.Ready), b.count(t, queue.Dead))
	}
}
