package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup is a queue "bench" whose READY holds jobs, the job-status buckets
// as an admitter creates them, and a handler that answers status and
// keeps what it was sent.
func setup(t *testing.T, jobs, status int) (*queuetest.Queue, *jobstatus.Store, *handler, []*queue.Job) {
	t.Helper()
	ctx, q := queuetest.StartQueue(t, queuetest.QueueConfig("bench"))
	store, err := jobstatus.Open(ctx, q.JS, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var js []*queue.Job
	for i := range jobs {
		j := queuetest.NewJob(t, "bench", "key-"+string(rune('a'+i%3)))
		if _, err := q.Pub.Publish(ctx, queue.Ready, j); err != nil {
			t.Fatal(err)
		}
		js = append(js, j)
	}
	h := &handler{status: status, got: map[string]http.Header{}, body: map[string]string{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/job"
	return q, store, h, js
}

type handler struct {
	url    string
	status int
	mu     sync.Mutex
	got    map[string]http.Header // by job id
	body   map[string]string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	id := r.Header.Get(spillway.HeaderJobID)
	h.got[id], h.body[id] = r.Header.Clone(), string(b)
	h.mu.Unlock()
	w.WriteHeader(h.status)
}

func floorRun(t *testing.T, q *queuetest.Queue, args ...string) (result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, append([]string{"--nats", q.Server.URL(), "--queue", "bench", "--fetch-wait", "100ms", "--json"}, args...), &out, &errOut)
	var res result
	if out.Len() > 0 {
		if jerr := json.Unmarshal(out.Bytes(), &res); jerr != nil {
			t.Fatalf("output %q: %v", out.String(), jerr)
		}
	}
	return res, err
}

// Every job in READY is POSTed with the worker's headers, gets a succeeded
// record, and is acked: READY ends empty and the run stops by itself.
func TestFloorRunsEveryJob(t *testing.T) {
	q, store, h, jobs := setup(t, 10, http.StatusOK)
	res, err := floorRun(t, q, "--url", h.url, "--slots", "4")
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 10 || res.Failed != 0 || res.JobsPerSec <= 0 {
		t.Errorf("result %+v, want 10 jobs, none failed", res)
	}
	ctx := context.Background()
	if n := queuetest.Stored(t, ctx, q.JS, queue.StreamName("bench", queue.Ready)); n != 0 {
		t.Errorf("READY holds %d jobs after the run, want 0", n)
	}
	for _, j := range jobs {
		got := h.got[j.ID]
		for name, want := range map[string]string{
			spillway.HeaderJobID: j.ID, spillway.HeaderQueue: "bench", spillway.HeaderKey: j.Key,
			spillway.HeaderAttempt: "1", spillway.HeaderIdempotencyKey: j.ID, "Content-Type": "application/octet-stream",
		} {
			if got.Get(name) != want {
				t.Errorf("job %s: header %s %q, want %q", j.ID, name, got.Get(name), want)
			}
		}
		if h.body[j.ID] != string(j.Payload) {
			t.Errorf("job %s: body %q, want %q", j.ID, h.body[j.ID], j.Payload)
		}
		rec, err := store.Get(ctx, j.ID)
		if err != nil {
			t.Fatalf("job %s: %v", j.ID, err)
		}
		if rec.State != spillway.StateSucceeded || rec.Attempts != 1 || rec.Queue != "bench" || rec.FinishedAt.IsZero() {
			t.Errorf("job %s: record %+v, want succeeded after 1 attempt", j.ID, rec)
		}
	}
}

// --count stops the run once that many jobs are done, leaving the rest.
func TestFloorStopsAtCount(t *testing.T) {
	q, _, h, _ := setup(t, 10, http.StatusOK)
	res, err := floorRun(t, q, "--url", h.url, "--slots", "1", "--count", "3")
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 3 {
		t.Errorf("%d jobs done, want 3", res.Jobs)
	}
	if n := queuetest.Stored(t, context.Background(), q.JS, queue.StreamName("bench", queue.Ready)); n != 7 {
		t.Errorf("READY holds %d jobs, want 7", n)
	}
}

// A handler failure ends the run with an error, and its job stays in READY.
func TestFloorFailsOnHandlerError(t *testing.T) {
	q, _, h, _ := setup(t, 1, http.StatusInternalServerError)
	res, err := floorRun(t, q, "--url", h.url, "--slots", "2")
	if err == nil || !strings.Contains(err.Error(), "500 Internal Server Error") {
		t.Fatalf("run: %v, want the handler's 500", err)
	}
	if res.Failed < 1 || res.Jobs != 0 { // nak'd, it may come back to the pull still open and fail again
		t.Errorf("result %+v, want failures and no job done", res)
	}
	if n := queuetest.Stored(t, context.Background(), q.JS, queue.StreamName("bench", queue.Ready)); n != 1 {
		t.Errorf("READY holds %d jobs, want the failed one", n)
	}
}

// Bad flags name the flag.
func TestFloorFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--url"},
		{[]string{"--url", "http://x", "--slots", "0"}, "--slots 0"},
		{[]string{"--url", "http://x", "--count", "-1"}, "--count -1"},
		{[]string{"--url", "http://x", "--fetch-wait", "1ms"}, "--fetch-wait 1ms"},
		{[]string{"--url", "http://x", "--queue", "a.b"}, "--queue"},
	} {
		err := run(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
