package door_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testBundle is an admitter with both doors, as admitterd assembles it,
// on an embedded JetStream server of the test's own. The HTTP door
// listens on 127.0.0.1 (srv); handler is the same door for requests a
// test builds itself (a peer address of its choice).
type testBundle struct {
	nats *queuetest.Server
	nc   *nats.Conn
	// Core: the configuration, JetStream, publisher, store and idempotency.
	*admittest.Core
	admitter *admit.Admitter
	status   *jobstatus.Store
	handler  http.Handler
	limits   jetstream.KeyValue // the runtime overrides' bucket
	srv      *httptest.Server
	client   *http.Client
	natsDoor *door.NATSDoor
	reg      *prometheus.Registry
	// access is the NATS doors' (the submit door's, and a job door's a
	// test starts with startJobs), counting into reg.
	access door.NATSAccess

	natsStopped bool
}

type setupOptions struct {
	keys      *door.APIKeys
	adminKeys *door.APIKeys
	// store decides instead of a memory store (nil: memory).
	store *admit.Failover
	// now, if set, is the admitter's clock.
	now func() time.Time
}

func setup(t *testing.T, yaml string, o setupOptions) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{nats: queuetest.Start(t), reg: prometheus.NewRegistry()}
	b.nc = b.nats.Connect(t)
	b.Core = admittest.NewCore(t, b.nc, yaml, o.store)
	var err error
	if b.status, err = jobstatus.Open(ctx, b.JS, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	// Queued jobs' status records are written off the submission's path,
	// as admitterd does; the test waits for the writes before NATS closes.
	// At most 32 at once: a batch of 1,000 on a loaded machine must not
	// time its writes out.
	var writes sync.WaitGroup
	t.Cleanup(writes.Wait)
	writing := make(chan struct{}, 32)
	opts := b.Options()
	metrics := admitterd.NewAdmitMetrics(b.reg)
	opts.Observe = metrics.Observe
	b.access = door.NATSAccess{Keys: o.keys, AdminKeys: o.adminKeys, Dropped: metrics.NATSDropped}
	opts.OnStored = func(j *queue.Job, st spillway.Status, at queue.Stored) {
		if st != spillway.Queued {
			return // an admitted job's status is its READY message until its outcome
		}
		r := jobstatus.FirstRecord(j, spillway.State(st), at)
		writes.Go(func() {
			writing <- struct{}{}
			defer func() { <-writing }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// A worker that started the job first wrote its record:
			// that is kept (Store.Create), as admitterd keeps it.
			if err := b.status.Create(ctx, r); err != nil && !errors.Is(err, jobstatus.ErrExists) {
				t.Errorf("writing the status of job %s: %v", r.ID, err)
			}
		})
	}
	if o.now != nil {
		opts.Now = o.now
	}
	b.admitter, err = admit.New(b.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if b.limits, err = overrides.Open(ctx, b.JS, 1); err != nil {
		t.Fatal(err)
	}
	b.handler = door.NewHTTP(door.HTTPOptions{Admitter: b.admitter, JS: b.JS, Status: b.status, Keys: o.keys, AdminKeys: o.adminKeys,
		Limits: b.limits, Ready: func() error { return nil }})
	b.srv = httptest.NewServer(b.handler)
	t.Cleanup(b.srv.Close)
	// Every answer the tests read is checked against the contract.
	b.client = apitest.Client(t, b.srv.Client())
	b.natsDoor = door.NewNATS(b.nc, b.admitter, nil)
	b.natsDoor.Access = b.access
	if err := b.natsDoor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.stopNATS(t) })
	return b
}

// stopNATS stops the NATS door, once.
func (b *testBundle) stopNATS(t *testing.T) {
	t.Helper()
	if b.natsStopped {
		return
	}
	b.natsStopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.natsDoor.Stop(ctx); err != nil {
		t.Errorf("stopping the NATS door: %v", err)
	}
}

// response is one HTTP answer, its body decoded as what its Content-Type
// says.
type response struct {
	code    int
	header  http.Header
	body    []byte
	reply   spillway.SubmitReply // application/json answers to a submission
	problem spillway.Problem     // application/problem+json
}

// request sends a bodiless request to the HTTP door and reads the answer.
func (b *testBundle) request(t *testing.T, method, path string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return readResponse(t, resp)
}

func readResponse(t *testing.T, resp *http.Response) response {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{code: resp.StatusCode, header: resp.Header, body: body}
	switch resp.Header.Get("Content-Type") {
	case spillway.ProblemContentType:
		if err := json.Unmarshal(body, &r.problem); err != nil {
			t.Fatalf("problem document %q: %v", body, err)
		}
		if r.problem.Status != r.code || r.problem.Type == "" || r.problem.Title == "" {
			t.Errorf("problem document %s for status %d: want its status, a type and a title", body, r.code)
		}
	case "application/json":
		_ = json.Unmarshal(body, &r.reply) // only submissions answer a reply
	}
	return r
}

// post submits body to queue q over the network with the given headers
// (name, value, name, value, …).
func (b *testBundle) post(t *testing.T, q string, body []byte, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/queues/"+q+"/jobs", bytes.NewReader(body), header...)
}

func (b *testBundle) get(t *testing.T, path string, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodGet, path, nil, header...)
}

// do sends a request for path over the network with the given headers.
func (b *testBundle) do(t *testing.T, method, path string, body io.Reader, header ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return readResponse(t, resp)
}

// serve runs r through the door in this process: the peer address is
// the test's to choose.
func (b *testBundle) serve(t *testing.T, r *http.Request) response {
	t.Helper()
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, r)
	resp := rec.Result()
	if err := apitest.Check(r, resp); err != nil {
		t.Errorf("apitest: %v", err)
	}
	return readResponse(t, resp)
}

// msgs is the number of messages in a queue's stream.
func (b *testBundle) msgs(t *testing.T, q string, d queue.Destination) uint64 {
	t.Helper()
	return admittest.Msgs(t, b.JS, q, d)
}

// jobOfKey is the last job stored in q's stream d under key's subject.
func (b *testBundle) jobOfKey(t *testing.T, q string, d queue.Destination, key string) (queue.Job, bool) {
	t.Helper()
	m, err := admittest.LastOfKey(t, b.JS, q, d, key)
	if err != nil {
		return queue.Job{}, false
	}
	j, err := queue.ParseJob(m.Header, m.Data)
	if err != nil {
		t.Fatalf("the message on %s is not a job: %v", m.Subject, err)
	}
	return j, true
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jetstreamSubjects asks StreamInfo for the message count of every subject.
func jetstreamSubjects() jetstream.StreamInfoOpt { return jetstream.WithSubjectFilter(">") }
