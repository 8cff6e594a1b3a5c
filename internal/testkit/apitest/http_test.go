package apitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestOpenAPIDocumentIsValid lints the contract: the document validates
// against the OpenAPI 3.1 schema, every $ref resolves, every operation
// has an operationId and described responses.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	for _, p := range apitest.Lint() {
		t.Error(p)
	}
}

// recorder is a testing.TB that keeps what the checking transport fails.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckFailsUndescribedAnswers is the checker's negative test: each
// answer here departs from the document in one way and must fail the
// test that sees it; the described ones must pass.
func TestCheckFailsUndescribedAnswers(t *testing.T) {
	t.Parallel()
	problem := func(w http.ResponseWriter, status int, typ string) {
		w.Header().Set("Content-Type", spillway.ProblemContentType)
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type": %q, "title": "t", "status": %d}`, typ, status)
	}
	answers := map[string]http.HandlerFunc{
		"GET /livez": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		},
		"GET /readyz": func(w http.ResponseWriter, _ *http.Request) { // 418 is not a response of /readyz
			w.WriteHeader(http.StatusTeapot)
		},
		"GET /metrics": func(w http.ResponseWriter, _ *http.Request) { // a header /metrics does not declare
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Spillway-Secret", "x")
			_, _ = io.WriteString(w, "up 1\n")
		},
		"GET /v1/queues": func(w http.ResponseWriter, _ *http.Request) { // a property QueueList does not name
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"queues": [], "surprise": 1}`)
		},
		"GET /v1/queues/{queue}": func(w http.ResponseWriter, _ *http.Request) { // a required property missing
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"name": "q"}`)
		},
		"GET /v1/jobs/{id}": func(w http.ResponseWriter, _ *http.Request) { // a problem type not in the document
			problem(w, http.StatusNotFound, "https://spillway.dev/problems/made-up")
		},
		"POST /v1/queues/{queue}/jobs": func(w http.ResponseWriter, _ *http.Request) { // 202 without Spillway-Status
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"queue": "q", "status": "admitted", "id": "x"}`)
		},
		"GET /v1/queues/{queue}/keys": func(w http.ResponseWriter, _ *http.Request) { // JSON where problem+json is due
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{}`)
		},
		"GET /nowhere": func(w http.ResponseWriter, _ *http.Request) { // a path the document lacks, answered 200
			_, _ = io.WriteString(w, "hello")
		},
		"GET /elsewhere": func(w http.ResponseWriter, _ *http.Request) { // the same, answered as the door does
			problem(w, http.StatusNotFound, spillway.ProblemNotFound)
		},
		"PUT /v1/queues": func(w http.ResponseWriter, _ *http.Request) { // 405 without Allow
			problem(w, http.StatusMethodNotAllowed, spillway.ProblemMethodNotAllowed)
		},
		"PATCH /v1/queues": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			problem(w, http.StatusMethodNotAllowed, spillway.ProblemMethodNotAllowed)
		},
	}
	mux := http.NewServeMux()
	for pattern, h := range answers {
		mux.HandleFunc(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		method, path string
		fails        string // "" for a described answer
	}{
		{"GET", "/livez", ""},
		{"HEAD", "/livez", ""},
		{"GET", "/readyz", "status 418"},
		{"GET", "/metrics", "undeclared header Spillway-Secret"},
		{"GET", "/v1/queues", "surprise"},
		{"GET", "/v1/queues/q", "missing"},
		{"GET", "/v1/jobs/j", "made-up"},
		{"POST", "/v1/queues/q/jobs", "Spillway-Status"},
		{"GET", "/v1/queues/q/keys", "application/json"},
		{"GET", "/nowhere", "want status 404"},
		{"GET", "/elsewhere", ""},
		{"PUT", "/v1/queues", "no Allow header"},
		{"PATCH", "/v1/queues", ""},
	} {
		rec := &recorder{TB: t}
		client := apitest.Client(rec, srv.Client())
		req, err := http.NewRequestWithContext(t.Context(), c.method, srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := strings.Join(rec.errs, "\n")
		switch {
		case c.fails == "" && got != "":
			t.Errorf("%s %s: a described answer failed: %s", c.method, c.path, got)
		case c.fails != "" && !strings.Contains(got, c.fails):
			t.Errorf("%s %s: want a failure saying %q, got %q", c.method, c.path, c.fails, got)
		}
	}
}
