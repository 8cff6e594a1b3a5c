package door_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A request on spillway.job.<id> answers what GET /v1/jobs/{id} does: the
// same record, byte for byte, with its state in Spillway-Status; or the
// same problem, with Spillway-Status error and the problem's media type.
func TestNATSJob(t *testing.T) {
	t.Parallel()
	b := setup(t, cancelConfig, setupOptions{})
	jd := door.NewNATSJobs(b.nc, b.JS, b.admitter, b.status, nil)
	if err := jd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := jd.Stop(ctx); err != nil {
			t.Errorf("stopping the job door: %v", err)
		}
	})
	ask := func(id string) *nats.Msg {
		t.Helper()
		resp, err := apitest.Request(t, b.nc, nats.NewMsg(spillway.JobPrefix+id), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	r := b.post(t, "q", nil, "X-Client", "a")
	if r.code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	id := r.reply.ID
	b.waitState(t, id, spillway.StateAdmitted)
	resp := ask(id)
	var job spillway.Job
	if err := json.Unmarshal(resp.Data, &job); err != nil {
		t.Fatalf("reply %q: %v", resp.Data, err)
	}
	if job.ID != id || job.Queue != "q" || job.State != spillway.StateAdmitted || job.EnqueuedAt.IsZero() {
		t.Errorf("job %s: %+v, want admitted in q", id, job)
	}
	if st, ct := resp.Header.Get(spillway.HeaderStatus), resp.Header.Get(spillway.HeaderContentType); st != "admitted" || ct != "application/json" {
		t.Errorf("headers %v, want Spillway-Status admitted, Content-Type application/json", resp.Header)
	}
	if h := b.get(t, "/v1/jobs/"+id); h.code != http.StatusOK || !bytes.Equal(bytes.TrimSpace(h.body), resp.Data) {
		t.Errorf("GET /v1/jobs/%s: %d %s; over NATS %s", id, h.code, h.body, resp.Data)
	}

	for _, c := range []struct {
		id     string
		status int
		typ    string
	}{
		{"0190f1c5-7b1e-7c4a-9f0e-3a1b2c3d4e5f", http.StatusNotFound, spillway.ProblemNotFound},
		{"not-a-job-id", http.StatusBadRequest, spillway.ProblemBadRequest},
	} {
		resp := ask(c.id)
		p, ok := spillway.ParseProblem(resp.Header.Get(spillway.HeaderContentType), resp.Data)
		if !ok || p.Status != c.status || p.Type != c.typ || resp.Header.Get(spillway.HeaderStatus) != string(spillway.Failed) {
			t.Errorf("job %q: %v %s, want a %d %s problem", c.id, resp.Header, resp.Data, c.status, c.typ)
		}
		h := b.get(t, "/v1/jobs/"+c.id)
		if h.code != c.status || h.problem.Type != c.typ {
			t.Errorf("GET /v1/jobs/%s: %d %s, want %d %s", c.id, h.code, h.body, c.status, c.typ)
		}
	}
}

// An admitter that keeps no job status answers every read not-found.
func TestNATSJobWithoutStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, cancelConfig, setupOptions{})
	jd := door.NewNATSJobs(b.nc, b.JS, b.admitter, nil, nil)
	if err := jd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = jd.Stop(context.Background()) })
	resp, err := apitest.Request(t, b.nc, nats.NewMsg(spillway.JobPrefix+"0190f1c5-7b1e-7c4a-9f0e-3a1b2c3d4e5f"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := spillway.ParseProblem(resp.Header.Get(spillway.HeaderContentType), resp.Data); !ok || p.Type != spillway.ProblemNotFound {
		t.Errorf("reply %v %s, want not-found", resp.Header, resp.Data)
	}
}
