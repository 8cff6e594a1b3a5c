package jobstatus_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func open(t *testing.T, ttl time.Duration) *jobstatus.Store {
	t.Helper()
	srv := queuetest.Start(t)
	s, err := jobstatus.Open(t.Context(), srv.JetStream(t), ttl, 1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func newID(t *testing.T) string {
	t.Helper()
	id, err := queue.NewJobID("email")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.UTC)

func TestPutGetRoundTrip(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	id := newID(t)
	want := jobstatus.Record{
		ID: id, Queue: "email", State: spillway.StateRetrying, Attempts: 2, LastError: "POST http://x: 500 Internal Server Error",
		EnqueuedAt: t0, NotBefore: t0.Add(time.Minute), StartedAt: t0.Add(time.Second), UpdatedAt: t0.Add(2 * time.Second),
	}
	if err := s.Put(t.Context(), want); err != nil {
		t.Fatalf("Put: %v", err)
	}
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got != want {
		t.Errorf("Get\n%+v\nwant\n%+v", got, want)
	}
	if _, err := s.Get(t.Context(), newID(t)); !errors.Is(err, jobstatus.ErrNotFound) {
		t.Errorf("Get of an unknown job: %v, want ErrNotFound", err)
	}
}

func TestRecordJSON(t *testing.T) {
	t.Parallel()
	rec := jobstatus.Record{ID: "01890a5d-ac96-774b-bcce-b302099a8057", Queue: "email", State: spillway.StateQueued, EnqueuedAt: t0, NotBefore: t0.Add(time.Second)}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"01890a5d-ac96-774b-bcce-b302099a8057","queue":"email","state":"queued","attempts":0,` +
		`"enqueued_at":"2030-01-02T03:04:05.6Z","not_before":"2030-01-02T03:04:06.6Z"}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	var back jobstatus.Record
	if err := json.Unmarshal(b, &back); err != nil || back != rec {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, rec)
	}
	// Records already stored spell every state so; they must read back.
	for _, word := range []string{"admitted", "queued", "running", "retrying", "succeeded", "dead", "expired", "cancelled"} {
		var r jobstatus.Record
		if err := json.Unmarshal([]byte(`{"state":"`+word+`"}`), &r); err != nil {
			t.Fatal(err)
		}
		if b, err := json.Marshal(r); err != nil || !strings.Contains(string(b), `"state":"`+word+`"`) {
			t.Errorf("state %s stored as %s, %v", word, b, err)
		}
		if !slices.Contains(states, r.State) {
			t.Errorf("stored state %q is none of spillway's", word)
		}
	}
}

var states = []spillway.State{spillway.StateAdmitted, spillway.StateQueued, spillway.StateRunning, spillway.StateRetrying,
	spillway.StateSucceeded, spillway.StateDead, spillway.StateExpired, spillway.StateCancelled}

func TestRecordsExpire(t *testing.T) {
	t.Parallel()
	s := open(t, time.Second)
	id := newID(t)
	put := time.Now() // the record is stored after this, and expires ≥ 1s after it is stored
	if err := s.Put(t.Context(), jobstatus.Record{ID: id, Queue: "q", State: spillway.StateAdmitted}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	// JetStream expires by MaxAge on a timer of its own: poll, with a deadline.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := s.Get(t.Context(), id)
		if errors.Is(err, jobstatus.ErrNotFound) {
			if age := time.Since(put); age < 950*time.Millisecond {
				t.Errorf("the record was gone %v after it was put, want ≥ 1s", age)
			}
			return
		}
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record of a 1s TTL is still there after %v", time.Since(put))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInvalidIDs(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	v4 := uuid.New().String()
	valid := newID(t)
	for _, id := range []string{"", "job-1", "*", ">", "a.b", "../etc/passwd", v4, strings.ToUpper(valid), "{" + valid + "}", "urn:uuid:" + valid, strings.ReplaceAll(valid, "-", "")} {
		if err := jobstatus.ValidateID(id); !errors.Is(err, jobstatus.ErrInvalidID) {
			t.Errorf("ValidateID(%q): %v, want ErrInvalidID", id, err)
		}
		if _, err := s.Get(t.Context(), id); !errors.Is(err, jobstatus.ErrInvalidID) {
			t.Errorf("Get(%q): %v, want ErrInvalidID", id, err)
		}
		if err := s.Put(t.Context(), jobstatus.Record{ID: id, State: spillway.StateQueued}); !errors.Is(err, jobstatus.ErrInvalidID) {
			t.Errorf("Put(%q): %v, want ErrInvalidID", id, err)
		}
	}
	if err := jobstatus.ValidateID(valid); err != nil {
		t.Errorf("ValidateID(%q): %v", valid, err)
	}
	if err := s.Put(t.Context(), jobstatus.Record{ID: valid, State: "lost"}); err == nil {
		t.Error("Put of an unknown state succeeded")
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	for _, tt := range []struct {
		ttl      time.Duration
		replicas int
	}{{-time.Second, 1}, {500 * time.Millisecond, 1}, {time.Hour, -1}, {time.Hour, 6}} {
		if _, err := jobstatus.Open(t.Context(), js, tt.ttl, tt.replicas); !errors.Is(err, jobstatus.ErrInvalidConfig) {
			t.Errorf("Open(ttl %v, replicas %d): %v, want ErrInvalidConfig", tt.ttl, tt.replicas, err)
		}
	}
	// Idempotent, and a second Open updates the TTL.
	for _, ttl := range []time.Duration{0, 0, time.Hour} {
		if _, err := jobstatus.Open(t.Context(), js, ttl, 0); err != nil {
			t.Fatalf("Open(ttl %v): %v", ttl, err)
		}
	}
	for i := range queue.KVShards {
		kv, err := js.KeyValue(t.Context(), queue.ShardBucket(jobstatus.Bucket, i))
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.TTL() != time.Hour || st.History() != 1 {
			t.Errorf("bucket %s: TTL %v, history %d; want 1h, 1", st.Bucket(), st.TTL(), st.History())
		}
	}
}

// Advance never moves a record backwards, whichever order updates arrive in.
func TestAdvanceNeverGoesBack(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	id := newID(t)
	step := func(state spillway.State, attempts int, lastError string) jobstatus.Record {
		return jobstatus.Record{ID: id, State: state, Attempts: attempts, LastError: lastError}
	}
	queued := step(spillway.StateQueued, 0, "")
	queued.Queue, queued.EnqueuedAt = "email", t0
	tests := []struct {
		update  jobstatus.Record
		applied bool
		want    spillway.State
	}{
		{step(spillway.StateRunning, 1, ""), true, spillway.StateRunning}, // before the admitter's own write
		{queued, false, spillway.StateRunning},
		{step(spillway.StateRetrying, 1, "boom"), true, spillway.StateRetrying},
		{step(spillway.StateRunning, 1, ""), false, spillway.StateRetrying}, // late
		{step(spillway.StateRunning, 2, ""), true, spillway.StateRunning},
		{step(spillway.StateSucceeded, 2, ""), true, spillway.StateSucceeded},
		{step(spillway.StateRunning, 2, ""), false, spillway.StateSucceeded}, // late
		{step(spillway.StateRetrying, 1, "old"), false, spillway.StateSucceeded},
	}
	for i, tt := range tests {
		got, applied, err := s.Advance(t.Context(), tt.update)
		if err != nil {
			t.Fatalf("step %d: Advance: %v", i, err)
		}
		if applied != tt.applied || got.State != tt.want {
			t.Errorf("step %d: Advance(%s, attempt %d) = %s, %v; want %s, %v", i, tt.update.State, tt.update.Attempts, got.State, applied, tt.want, tt.applied)
		}
	}
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	// Fields an update left zero were kept from earlier ones... except the
	// admitter's, which came too late to be merged.
	if got.State != spillway.StateSucceeded || got.Attempts != 2 || got.LastError != "boom" {
		t.Errorf("record %+v: want succeeded after 2 tries, last error boom", got)
	}
}

// Concurrent writers of one record do not lose each other's updates: the
// furthest one wins.
func TestAdvanceConcurrently(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	id := newID(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for attempt := 1; attempt <= 20; attempt++ {
		for _, state := range []spillway.State{spillway.StateRunning, spillway.StateRetrying} {
			wg.Go(func() {
				_, _, err := s.Advance(context.WithoutCancel(t.Context()), jobstatus.Record{ID: id, Queue: "q", State: state, Attempts: attempt})
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Advance: %v", err)
		}
	}
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 20 || got.State != spillway.StateRetrying {
		t.Errorf("record %+v: want retrying after 20 tries", got)
	}
}

// Create writes a job's first record only: the admitter's write, landing
// after a worker already started the job, changes nothing.
func TestCreate(t *testing.T) {
	t.Parallel()
	s := open(t, 0)
	id := newID(t)
	first := jobstatus.Record{ID: id, Queue: "email", State: spillway.StateQueued, EnqueuedAt: t0, NotBefore: t0.Add(time.Second)}
	if err := s.Create(t.Context(), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := s.Create(t.Context(), first); !errors.Is(err, jobstatus.ErrExists) {
		t.Errorf("second Create: %v, want ErrExists", err)
	}
	late := newID(t)
	if _, _, err := s.Advance(t.Context(), jobstatus.Record{ID: late, Queue: "email", State: spillway.StateRunning, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context(), jobstatus.Record{ID: late, Queue: "email", State: spillway.StateAdmitted}); !errors.Is(err, jobstatus.ErrExists) {
		t.Errorf("Create after a worker's write: %v, want ErrExists", err)
	}
	if rec, err := s.Get(t.Context(), late); err != nil || rec.State != spillway.StateRunning {
		t.Errorf("record %+v, %v: want running", rec, err)
	}
	if err := s.Create(t.Context(), jobstatus.Record{ID: "nope", State: spillway.StateQueued}); !errors.Is(err, jobstatus.ErrInvalidID) {
		t.Errorf("Create with a bad id: %v, want ErrInvalidID", err)
	}
}
