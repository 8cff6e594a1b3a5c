package door_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// cancelConfig: per X-Client, one job at once and the rest excess, due at
// once; the backlog holds one job of a key. No worker runs until the test
// starts one, so a queued job stays queued until then.
const cancelConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 1}
    backlog: {capacity: 10, per_key_capacity: 1, leak_rate: 20/s}
`

// waitState waits for job id's status to be in state want: its record,
// or, for an admitted job, its READY message (jobstatus.Locator).
func (b *testBundle) waitState(t *testing.T, id string, want spillway.State) {
	t.Helper()
	loc := jobstatus.NewLocator(b.status, b.JS, func() []string {
		var names []string
		for _, q := range b.admitter.Config().Queues {
			names = append(names, q.Name)
		}
		return names
	})
	admittest.WaitFor(t, 10*time.Second, "job "+id+" "+string(want), func() bool {
		rec, err := loc.Get(t.Context(), id)
		return err == nil && rec.State == want
	})
}

// A queued job cancelled over HTTP never runs, its record says cancelled,
// and its key's place in the backlog is free at once; a running job, a
// cancelled one and an admitted one answer 409 with their state.
func TestHTTPCancelQueuedJob(t *testing.T) {
	t.Parallel()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, cancelConfig, setupOptions{keys: keys})
	auth := []string{"X-Api-Key", testKey}
	submit := func(want string) string {
		t.Helper()
		r := b.post(t, "q", []byte("x"), append([]string{"X-Client", "a"}, auth...)...)
		if r.code == http.StatusAccepted && string(r.reply.Status) == want {
			return r.reply.ID
		}
		if r.code != http.StatusAccepted && r.problem.Type == want {
			return ""
		}
		t.Fatalf("submit: %d %s, want %s", r.code, r.body, want)
		return ""
	}
	cancel := func(id string, header ...string) response {
		t.Helper()
		return b.do(t, http.MethodDelete, "/v1/jobs/"+id, nil, header...)
	}

	admitted := submit(string(spillway.Admitted))
	queued := submit(string(spillway.Queued))
	submit(spillway.ProblemKeyFull) // the key's one place is taken
	b.waitState(t, queued, spillway.StateQueued)
	b.waitState(t, admitted, spillway.StateAdmitted)

	if r := cancel(queued); r.code != http.StatusUnauthorized {
		t.Errorf("cancel without an API key: %d %s, want 401", r.code, r.body)
	}
	r := cancel(queued, auth...)
	var rec jobstatus.Record
	if err := json.Unmarshal(r.body, &rec); r.code != http.StatusOK || err != nil || rec.State != spillway.StateCancelled || rec.ID != queued {
		t.Fatalf("cancel the queued job: %d %s, want 200 and its record, cancelled", r.code, r.body)
	}
	// Its place is free at once: the key submits again and is queued.
	again := submit(string(spillway.Queued))
	if n := admittest.Msgs(t, b.JS, "q", queue.Backlog); n != 1 {
		t.Errorf("the backlog holds %d jobs after the cancel and a new one, want 1", n)
	}
	if got, err := b.status.Get(t.Context(), queued); err != nil || got.State != spillway.StateCancelled || got.FinishedAt.IsZero() {
		t.Errorf("the cancelled job's record: %+v %v, want cancelled with a finish time", got, err)
	}

	for _, c := range []struct {
		id    string
		code  int
		typ   string
		state spillway.State
	}{
		{queued, http.StatusConflict, spillway.ProblemConflict, spillway.StateCancelled},
		{admitted, http.StatusConflict, spillway.ProblemConflict, spillway.StateAdmitted},
		{"0190f1c5-7b1e-7c4a-9f0e-3a1b2c3d4e5f", http.StatusNotFound, spillway.ProblemNotFound, ""},
		{"not-a-job-id", http.StatusBadRequest, spillway.ProblemBadRequest, ""},
	} {
		r := cancel(c.id, auth...)
		if r.code != c.code || r.problem.Type != c.typ || string(r.problem.State) != string(c.state) {
			t.Errorf("cancel %s: %d %s, want %d %s state %q", c.id, r.code, r.body, c.code, c.typ, c.state)
		}
	}

	// A real worker drains the backlog now. It must run the admitted job
	// and the new one, never the cancelled one; the new one is held
	// running while the test tries to cancel it.
	var (
		mu   sync.Mutex
		ran  []string
		hold = make(chan struct{})
	)
	started := make(chan string, 4)
	runWorker(t, b, func(_ context.Context, j *queue.Job) error {
		mu.Lock()
		ran = append(ran, j.ID)
		mu.Unlock()
		started <- j.ID
		if j.ID == again {
			<-hold
		}
		return nil
	})
	waitStarted(t, started, again)
	r = cancel(again, auth...)
	if r.code != http.StatusConflict || r.problem.Type != spillway.ProblemConflict || string(r.problem.State) != string(spillway.StateRunning) {
		t.Errorf("cancel the running job: %d %s, want 409 conflict, state running", r.code, r.body)
	}
	close(hold)
	b.waitState(t, again, spillway.StateSucceeded)
	b.waitState(t, admitted, spillway.StateSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(ran, queued) || len(ran) != 2 {
		t.Errorf("the handler ran %v; want %s and %s, never the cancelled %s", ran, admitted, again, queued)
	}
}

// The NATS door's cancel answers as its submissions do: a CancelReply
// with Spillway-Status.
func TestNATSCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, cancelConfig, setupOptions{})
	cd := door.NewNATSJobs(b.nc, b.JS, b.admitter, b.status, nil)
	if err := cd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cd.Stop(ctx); err != nil {
			t.Errorf("stopping the cancel door: %v", err)
		}
	})
	submit := func() spillway.SubmitReply {
		t.Helper()
		m := nats.NewMsg(spillway.SubmitPrefix + "q")
		m.Header.Set("X-Client", "a")
		resp, err := apitest.Request(t, b.nc, m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep spillway.SubmitReply
		if err := json.Unmarshal(resp.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	ask := func(q, id string, inHeader bool) (spillway.CancelReply, string) {
		t.Helper()
		m := nats.NewMsg(spillway.CancelPrefix + q)
		if inHeader {
			m.Header.Set(spillway.HeaderJobID, id)
		} else {
			m.Data = []byte(id)
		}
		resp, err := apitest.Request(t, b.nc, m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep spillway.CancelReply
		if err := json.Unmarshal(resp.Data, &rep); err != nil {
			t.Fatalf("reply %q: %v", resp.Data, err)
		}
		return rep, resp.Header.Get(spillway.HeaderStatus)
	}

	admitted, queued := submit(), submit()
	if admitted.Status != spillway.Admitted || queued.Status != spillway.Queued {
		t.Fatalf("submissions: %+v %+v, want admitted then queued", admitted, queued)
	}
	b.waitState(t, queued.ID, spillway.StateQueued)
	b.waitState(t, admitted.ID, spillway.StateAdmitted)

	rep, st := ask("q", queued.ID, true)
	if rep.Status != spillway.Cancelled || st != "cancelled" || rep.ID != queued.ID || rep.State != "cancelled" {
		t.Errorf("cancel the queued job: %+v (header %q), want cancelled", rep, st)
	}
	if again := submit(); again.Status != spillway.Queued {
		t.Errorf("the key after the cancel: %+v, want queued", again)
	}
	for _, c := range []struct {
		q, id    string
		inHeader bool
		typ      string
		state    spillway.State
	}{
		{"q", queued.ID, false, spillway.ProblemConflict, "cancelled"},
		{"q", admitted.ID, true, spillway.ProblemConflict, "admitted"},
		{"other", queued.ID, true, spillway.ProblemNotFound, ""},
		{"q", "", false, spillway.ProblemBadRequest, ""},
		{"q", "../x", false, spillway.ProblemBadRequest, ""},
		{"q", "0190f1c5-7b1e-7c4a-9f0e-3a1b2c3d4e5f", true, spillway.ProblemNotFound, ""},
	} {
		rep, st := ask(c.q, c.id, c.inHeader)
		if rep.Status != spillway.Failed || st != "error" || rep.Type != c.typ || rep.State != c.state || rep.Error == "" {
			t.Errorf("cancel %q on %s: %+v (header %q), want error %s state %q", c.id, c.q, rep, st, c.typ, c.state)
		}
	}
}

// runWorker runs a worker of queue q with job status records and their
// start gate, as workerd does, until the test ends.
func runWorker(t *testing.T, b *testBundle, h worker.Handler) {
	t.Helper()
	rec := jobstatus.NewRecorder(b.status, nil, 0)
	qc := b.Config.Queues[0].Backlog
	qc.Memory = true // as admittest made the streams
	w, err := worker.NewWorker(b.JS, worker.WorkerConfig{
		Queue:     qc,
		FetchWait: 50 * time.Millisecond,
		Observe:   rec.Observe,
		StartGate: rec.StartGate,
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	rctx, rcancel := context.WithCancel(context.Background())
	var rwg sync.WaitGroup
	rwg.Go(func() { _ = rec.Run(rctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		rcancel() // after the worker, so its last steps are written
		rwg.Wait()
	})
}

func waitStarted(t *testing.T, started <-chan string, id string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-started:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("job %s did not start within 10s", id)
		}
	}
}
