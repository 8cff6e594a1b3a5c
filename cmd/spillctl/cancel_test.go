package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// spillctl cancel sends DELETE /v1/jobs/{id} with the API key and prints
// the cancelled job, or the admitter's reason for refusing.
func TestCancel(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete || r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		problem := func(status int, typ, detail, state string) {
			w.Header().Set("Content-Type", spillway.ProblemContentType)
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(spillway.Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail, State: spillway.State(state)})
		}
		switch r.URL.Path {
		case "/v1/jobs/j1":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(jobStatus{ID: "j1", Queue: "email", State: "cancelled", FinishedAt: at(0)})
		case "/v1/jobs/j2":
			problem(http.StatusConflict, spillway.ProblemConflict, "job j2 is running: only a queued job can be cancelled", "running")
		default:
			problem(http.StatusNotFound, spillway.ProblemNotFound, "no status for this job id", "")
		}
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"SPILLWAY_SERVER": srv.URL, "SPILLWAY_API_KEY": "k"}
	out, _, err := spillctlEnv(t, env, "", "cancel", "j1")
	if err != nil || !strings.Contains(out, "job j1\n") || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", "cancel", "--json", "j1")
	if err != nil || !strings.Contains(out, `"state": "cancelled"`) {
		t.Fatalf("cancel --json: %v\n%s", err, out)
	}
	if _, _, err := spillctlEnv(t, env, "", "cancel", "j2"); err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "is running") {
		t.Errorf("cancel of a running job: %v", err)
	}
	if _, _, err := spillctlEnv(t, env, "", "cancel", "j404"); err == nil || !strings.Contains(err.Error(), `knows no job "j404"`) {
		t.Errorf("cancel of an unknown job: %v", err)
	}
	if _, _, err := spillctlEnv(t, env, "", "cancel"); !errorsIsUsage(err) || !strings.Contains(err.Error(), "want one job ID") {
		t.Errorf("cancel without an id: %v", err)
	}
}
