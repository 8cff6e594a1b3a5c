package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// spillctl weights sends each subcommand's method, path and body with the
// admin key, and prints the answers; a submit key's 403 says to use an
// admin key; a bad WEIGHT is a usage error before any request.
func TestWeightsCommands(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin-key" {
			w.Header().Set("Content-Type", spillway.ProblemContentType)
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(spillway.Problem{Type: spillway.ProblemForbidden, Title: "Forbidden", Status: 403, Detail: "this key may submit and read, not administer"})
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath()+" "+strings.TrimSpace(string(b)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(r.URL.Path, "/weights"):
			_ = json.NewEncoder(w).Encode(spillway.WeightList{Queue: "email", Rules: []spillway.WeightRule{
				{Key: "tenant-*", Weight: 2, Source: "config"},
				{Key: "tenant-*", Weight: 4, Source: "runtime", InForce: true, By: "sha256:0123456789ab", At: &at},
			}})
		default:
			_ = json.NewEncoder(w).Encode(spillway.KeyWeight{Queue: "email", Key: "tenant-a", Weight: 3, Source: "runtime",
				Pattern: "tenant-a", By: "sha256:0123456789ab", At: &at})
		}
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"SPILLWAY_SERVER": srv.URL, "SPILLWAY_ADMIN_KEY": "admin-key"}

	out, _, err := spillctlEnv(t, env, "", "weights", "set", "email", "tenant-a", "3")
	if err != nil || !strings.Contains(out, "email tenant-a: weight 3 (runtime by sha256:0123456789ab") {
		t.Errorf("set: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "weights", "get", "email", "tenant-a"); err != nil || !strings.Contains(out, "weight 3 (runtime") {
		t.Errorf("get: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "weights", "list", "email"); err != nil || !strings.Contains(out, "no: replaced by runtime") {
		t.Errorf("list: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "weights", "rm", "email", "tenant-*"); err != nil || !strings.Contains(out, "removed") {
		t.Errorf("rm: %v\n%s", err, out)
	}
	want := []string{
		`PUT /v1/queues/email/weights/tenant-a {"weight":3}`,
		`GET /v1/queues/email/weights/tenant-a `,
		`GET /v1/queues/email/weights `,
		`DELETE /v1/queues/email/weights/tenant-%2A `,
	}
	mu.Lock()
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	mu.Unlock()

	submitKey := map[string]string{"SPILLWAY_SERVER": srv.URL, "SPILLWAY_ADMIN_KEY": "submit-key"}
	if _, _, err := spillctlEnv(t, submitKey, "", "weights", "list", "email"); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("list without an admin key: %v", err)
	}
	for _, args := range [][]string{{"weights"}, {"weights", "nope"}, {"weights", "get", "email"}, {"weights", "set", "email", "k"},
		{"weights", "set", "email", "k", "0"}, {"weights", "set", "email", "k", "1001"}, {"weights", "set", "email", "k", "two"}} {
		if _, _, err := spillctlEnv(t, env, "", args...); !errorsIsUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if out, _, err := spillctlEnv(t, env, "", "weights", "--help"); err != nil || !strings.Contains(out, "Usage: spillctl weights list QUEUE") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}
