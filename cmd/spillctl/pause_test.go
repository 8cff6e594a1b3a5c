package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// spillctl pause and resume send the admin key, the reason, and print the
// queue's state; a submit key's 403 says to use an admin key; spillctl
// queues shows a paused queue.
func TestPauseResumeCommands(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 16, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Authorization") != "Bearer admin-key" {
			w.Header().Set("Content-Type", spillway.ProblemContentType)
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(spillway.Problem{Type: spillway.ProblemForbidden, Title: "Forbidden", Status: 403, Detail: "this key may submit and read, not administer"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/queues/email/pause":
			var req spillway.PauseRequest
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &req)
			_ = json.NewEncoder(w).Encode(spillway.PauseReply{Queue: "email", Paused: true, At: at, By: "sha256:0123456789ab", Reason: req.Reason})
		case r.Method == http.MethodPost && r.URL.Path == "/v1/queues/email/resume":
			_ = json.NewEncoder(w).Encode(spillway.PauseReply{Queue: "email", At: at, By: "sha256:0123456789ab"})
		case r.URL.Path == "/v1/queues":
			_ = json.NewEncoder(w).Encode(spillway.QueueList{Queues: []spillway.QueueInfo{{Name: "email", LeakRate: "10/s", Paused: true, PausedAt: &at, PausedBy: "sha256:0123456789ab", PauseReason: "provider down"}}})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"SPILLWAY_SERVER": srv.URL, "SPILLWAY_ADMIN_KEY": "admin-key"}
	out, _, err := spillctlEnv(t, env, "", "pause", "email", "--reason", "provider down")
	if err != nil || !strings.Contains(out, "email: paused") || !strings.Contains(out, "(provider down)") || !strings.Contains(out, "sha256:0123456789ab") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", "resume", "email")
	if err != nil || !strings.Contains(out, "email: resumed") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	out, _, err = spillctlEnv(t, env, "", "queues")
	if err != nil || !strings.Contains(out, "PAUSED") || !strings.Contains(out, "provider down") || !strings.Contains(out, "spillctl resume email") {
		t.Errorf("queues with a paused queue: %v\n%s", err, out)
	}
	submitKey := map[string]string{"SPILLWAY_SERVER": srv.URL, "SPILLWAY_API_KEY": "submit-key"}
	if _, _, err := spillctlEnv(t, submitKey, "", "pause", "email"); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("pause without an admin key: %v", err)
	}
	if _, _, err := spillctlEnv(t, env, "", "pause"); !errorsIsUsage(err) {
		t.Errorf("pause without a queue: %v", err)
	}
}
