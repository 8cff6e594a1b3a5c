package door_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Two tenants' submit keys and an operator's admin key.
const (
	tenantA = "tenant-a-0123456789abcdef"
	tenantB = "tenant-b-0123456789abcdef"
)

// setupTenants is a bundle whose doors know tenantA's and tenantB's submit
// keys and adminKey, with the job subjects' NATS door started too.
func setupTenants(t *testing.T) *testBundle {
	t.Helper()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", tenantA+"\n"+tenantB+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	admins, err := door.LoadAPIKeys(writeFile(t, "admin-keys", adminKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, cancelConfig, setupOptions{keys: keys, adminKeys: admins})
	b.startJobs(t)
	return b
}

// startJobs starts the job subjects' NATS door (spillway.job.<id>,
// spillway.cancel.<queue>) with the bundle's access, until the test ends.
func (b *testBundle) startJobs(t *testing.T) {
	t.Helper()
	jd := door.NewNATSJobs(b.nc, b.JS, b.admitter, b.status, nil)
	jd.Access = b.access
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
}

// natsRequest sends m on b's connection and returns the reply.
func (b *testBundle) natsRequest(t *testing.T, m *nats.Msg) *nats.Msg {
	t.Helper()
	resp, err := b.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatalf("request on %s: %v", m.Subject, err)
	}
	return resp
}

// withKey is m with key as its Authorization header.
func withKey(m *nats.Msg, key string) *nats.Msg {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set("Authorization", "Bearer "+key)
	return m
}

// A request whose reply subject is not under nats.reply_prefix is dropped
// before anything is done: the admitter publishes nothing there, so that a
// producer cannot have it write where the producer could not — here the
// pause state of a queue, a KV key of the pacers' bucket, which an answer
// of the door would have overwritten, resuming the queue.
func TestNATSReplySubjectOutsidePrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, cancelConfig, setupOptions{})
	b.startJobs(t)
	ctx := t.Context()
	if err := pace.SetPause(ctx, b.JS, "q", 1, pace.PauseState{Paused: true, At: time.Now().UTC(), By: "operator"}); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 {
		mfs, err := b.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "spillway_nats_requests_dropped_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == door.DropReplySubject {
					return m.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	if n := dropped(); n != 0 {
		t.Fatalf("spillway_nats_requests_dropped_total{reason=%q} is %v before any request, want 0", door.DropReplySubject, n)
	}
	forged := "$KV." + pace.PacerBucket + "." + pace.PauseKey("q")
	for _, subject := range []string{spillway.SubmitPrefix + "nope", spillway.SubmitBatchPrefix + "q", spillway.CancelPrefix + "q", spillway.JobPrefix + "x"} {
		m := natsMsg("q", []byte("x"), "X-Client", "forger")
		m.Subject, m.Reply = subject, forged
		if err := b.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	admittest.WaitFor(t, 10*time.Second, "4 requests dropped", func() bool { return dropped() == 4 })
	// The door answers requests on the prefix still; by the time this
	// answer comes, the forged ones were long handled.
	if rep := ask(t, b.nc, natsMsg("q", []byte("x"), "X-Client", "honest")); rep.Status != spillway.Admitted {
		t.Errorf("an honest request: %+v, want admitted", rep)
	}
	st, err := pace.ReadPause(ctx, b.JS, "q")
	if err != nil || !st.Paused || st.By != "operator" {
		t.Errorf("the pause state after the forged requests: %+v %v; want still paused by operator", st, err)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 1 {
		t.Errorf("%d jobs stored, want the honest one only", n)
	}
}

// With API keys, every NATS request carries one (Authorization: Bearer
// or X-Api-Key, a submit or an admin key), or is answered unauthorized.
func TestNATSAuthentication(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	for _, c := range []struct {
		name   string
		header []string
		want   spillway.Status
	}{
		{"no key", nil, spillway.Failed},
		{"a wrong key", []string{"Authorization", "Bearer not-a-key-0123456789"}, spillway.Failed},
		{"a submit key as Bearer", []string{"authorization", "bearer " + tenantA}, spillway.Admitted},
		{"a submit key as X-Api-Key", []string{"X-Api-Key", tenantB}, spillway.Admitted},
		{"an admin key", []string{"Authorization", "Bearer " + adminKey}, spillway.Admitted},
	} {
		client := c.name
		rep := ask(t, b.nc, natsMsg("q", []byte("x"), append([]string{"X-Client", client}, c.header...)...))
		if rep.Status != c.want || (c.want == spillway.Failed && rep.Type != spillway.ProblemUnauthorized) {
			t.Errorf("%s: %+v, want %s", c.name, rep, c.want)
		}
	}
	batch := b.natsRequest(t, &nats.Msg{Subject: spillway.SubmitBatchPrefix + "q", Data: []byte(`[{"headers": {"X-Client": "batch"}, "payload": "x"}]`)})
	var br spillway.BatchReply
	if err := json.Unmarshal(batch.Data, &br); err != nil || br.Type != spillway.ProblemUnauthorized || len(br.Results) != 0 {
		t.Errorf("a batch without a key: %s, want unauthorized", batch.Data)
	}
	cancel := b.natsRequest(t, &nats.Msg{Subject: spillway.CancelPrefix + "q", Data: []byte("01a21ff7-36dc-739b-bffd-feceddd00587")})
	var cr spillway.CancelReply
	if err := json.Unmarshal(cancel.Data, &cr); err != nil || cr.Type != spillway.ProblemUnauthorized {
		t.Errorf("a cancel without a key: %s, want unauthorized", cancel.Data)
	}
	job := b.natsRequest(t, nats.NewMsg(spillway.JobPrefix+"01a21ff7-36dc-739b-bffd-feceddd00587"))
	if p, ok := spillway.ParseProblem(job.Header.Get(spillway.HeaderContentType), job.Data); !ok || p.Type != spillway.ProblemUnauthorized || p.Status != http.StatusUnauthorized {
		t.Errorf("a job read without a key: %s, want unauthorized", job.Data)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 3 {
		t.Errorf("%d jobs stored, want the 3 with a valid key", n)
	}
}

// A job is its submitter's: the admitter stamps its key's fingerprint on
// the job (whatever the producer sent as Spillway-Submitter) and on its
// record; another tenant's read and cancel are answered as for an unknown
// job, over both doors; an admin key reads and cancels it, and the record
// says who cancelled it.
func TestJobsBelongToTheirSubmitter(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	submit := func(key, client string) spillway.SubmitReply {
		t.Helper()
		r := b.post(t, "q", []byte("x"), "X-Client", client, "X-Api-Key", key, spillway.HeaderSubmitter, door.KeyFingerprint(tenantB))
		if r.code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.code, r.body)
		}
		return r.reply
	}
	submit(tenantA, "a")           // admitted: the key's one unit
	queued := submit(tenantA, "a") // queued
	if queued.Status != spillway.Queued {
		t.Fatalf("second submission: %+v, want queued", queued)
	}
	b.waitState(t, queued.ID, spillway.StateQueued)
	fpA, fpAdmin := door.KeyFingerprint(tenantA), door.KeyFingerprint(adminKey)
	if j, ok := b.jobOfKey(t, "q", queue.Backlog, "a"); !ok || j.Header.Values(spillway.HeaderSubmitter)[0] != fpA || len(j.Header.Values(spillway.HeaderSubmitter)) != 1 {
		t.Errorf("the stored job's %s: %v, want %s alone", spillway.HeaderSubmitter, j.Header.Values(spillway.HeaderSubmitter), fpA)
	}

	unknown := "01a21ff7-36dc-739b-bffd-feceddd00587"
	notFound := func(r response, id string) bool {
		want := b.get(t, "/v1/jobs/"+unknown, "X-Api-Key", tenantB)
		want.problem.ID, want.problem.Instance = id, "/v1/jobs/"+id
		return r.code == http.StatusNotFound && r.problem == want.problem
	}
	if r := b.get(t, "/v1/jobs/"+queued.ID, "X-Api-Key", tenantB); !notFound(r, queued.ID) {
		t.Errorf("tenant B reads A's job: %d %s, want the unknown job's 404", r.code, r.body)
	}
	if r := b.do(t, http.MethodDelete, "/v1/jobs/"+queued.ID, nil, "X-Api-Key", tenantB); !notFound(r, queued.ID) {
		t.Errorf("tenant B cancels A's job: %d %s, want the unknown job's 404", r.code, r.body)
	}
	if m := b.natsRequest(t, withKey(nats.NewMsg(spillway.JobPrefix+queued.ID), tenantB)); !bytesContainNotFound(m) {
		t.Errorf("tenant B reads A's job over NATS: %s, want not-found", m.Data)
	}
	var cr spillway.CancelReply
	m := b.natsRequest(t, withKey(&nats.Msg{Subject: spillway.CancelPrefix + "q", Data: []byte(queued.ID)}, tenantB))
	if err := json.Unmarshal(m.Data, &cr); err != nil || cr.Type != spillway.ProblemNotFound {
		t.Errorf("tenant B cancels A's job over NATS: %s, want not-found", m.Data)
	}

	for _, key := range []string{tenantA, adminKey} {
		r := b.get(t, "/v1/jobs/"+queued.ID, "X-Api-Key", key)
		var job spillway.Job
		if err := json.Unmarshal(r.body, &job); r.code != http.StatusOK || err != nil || job.Submitter != fpA || job.State != spillway.StateQueued {
			t.Errorf("GET with %s: %d %s, want 200 with submitter %s", door.KeyFingerprint(key), r.code, r.body, fpA)
		}
	}
	m = b.natsRequest(t, withKey(&nats.Msg{Subject: spillway.CancelPrefix + "q", Data: []byte(queued.ID)}, adminKey))
	if err := json.Unmarshal(m.Data, &cr); err != nil || cr.Status != spillway.Cancelled {
		t.Fatalf("the admin cancels A's job over NATS: %s, want cancelled", m.Data)
	}
	rec, err := b.status.Get(t.Context(), queued.ID)
	if err != nil || rec.State != spillway.StateCancelled || rec.Submitter != fpA || rec.CancelledBy != fpAdmin {
		t.Errorf("the record: %+v %v, want cancelled, submitter %s, cancelled by %s", rec, err, fpA, fpAdmin)
	}
	var job spillway.Job
	r := b.get(t, "/v1/jobs/"+queued.ID, "X-Api-Key", tenantA)
	if err := json.Unmarshal(r.body, &job); err != nil || job.CancelledBy != fpAdmin {
		t.Errorf("A reads its cancelled job: %d %s, want cancelled_by %s", r.code, r.body, fpAdmin)
	}
}

// bytesContainNotFound reports whether a job reply is the not-found problem.
func bytesContainNotFound(m *nats.Msg) bool {
	p, ok := spillway.ParseProblem(m.Header.Get(spillway.HeaderContentType), m.Data)
	return ok && p.Type == spillway.ProblemNotFound && p.Status == http.StatusNotFound
}

// The two-tenant probe of idempotency keys over HTTP: tenant B reusing
// tenant A's Idempotency-Key gets a job of its own, never A's id or
// answer; A reusing it with another payload is 422 idempotency-mismatch;
// A sending the same job again is its duplicate.
func TestHTTPIdempotencyPerTenant(t *testing.T) {
	t.Parallel()
	b := setupTenants(t)
	post := func(key, client, payload string) response {
		t.Helper()
		return b.post(t, "q", []byte(payload), "X-Client", client, "X-Api-Key", key, spillway.HeaderIdempotencyKey, "order-1")
	}
	a := post(tenantA, "shared", "A's job")
	if a.code != http.StatusAccepted {
		t.Fatalf("A: %d %s", a.code, a.body)
	}
	bb := post(tenantB, "b", "B's job")
	if bb.code != http.StatusAccepted || bb.reply.ID == a.reply.ID || bb.reply.Duplicate {
		t.Errorf("B with A's key: %d %s; want a job of its own, not A's %s", bb.code, bb.body, a.reply.ID)
	}
	if r := post(tenantA, "shared", "another job"); r.code != http.StatusUnprocessableEntity || r.problem.Type != spillway.ProblemIdempotencyMismatch ||
		r.problem.Field != spillway.HeaderIdempotencyKey {
		t.Errorf("A's key with another payload: %d %s, want 422 idempotency-mismatch", r.code, r.body)
	}
	if r := post(tenantA, "shared", "A's job"); r.code != http.StatusAccepted || !r.reply.Duplicate || r.reply.ID != a.reply.ID {
		t.Errorf("A's job again: %d %s, want a duplicate of %s", r.code, r.body, a.reply.ID)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 2 {
		t.Errorf("%d jobs stored, want A's and B's", n)
	}
}
