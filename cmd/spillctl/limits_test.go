package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// spillctl limits sends each subcommand's method, path and parameters
// with the admin key, and prints the answers; a submit key's 403 says to
// use an admin key.
func TestLimitsCommands(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 16, 0, 0, 0, time.UTC)
	url, seen := fakeAdmin(t, func(r *http.Request) any {
		if strings.HasSuffix(r.URL.Path, "/limits") {
			return spillway.LimitList{Queue: "email", Tiers: []spillway.TierLimits{{Tier: "per-key", KeyedBy: "header:X-Api-Key",
				Mode: "enforce", Algorithm: "token_bucket", LimitParams: spillway.LimitParams{Rate: "10/s", Burst: 20},
				Overrides: []spillway.LimitOverride{{Key: "tenant-*", LimitParams: spillway.LimitParams{Rate: "50/s", Burst: 50}, Source: "config", Line: 12}}}}}
		}
		return spillway.KeyLimit{Queue: "email", Tier: "per-key", Key: "tenant-a", Algorithm: "token_bucket",
			LimitParams: spillway.LimitParams{Rate: "100/s", Burst: 200}, Source: "runtime", Pattern: "tenant-a", By: "sha256:0123456789ab", At: &at}
	})
	env := map[string]string{"SPILLWAY_SERVER": url, "SPILLWAY_ADMIN_KEY": "admin-key"}

	out, _, err := spillctlEnv(t, env, "", "limits", "set", "email", "per-key", "tenant-a", "--rate", "100/s", "--burst", "200")
	if err != nil || !strings.Contains(out, "email/per-key tenant-a: token_bucket rate=100/s burst=200 (runtime by sha256:0123456789ab") {
		t.Errorf("set: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "limits", "get", "email", "per-key", "tenant-a"); err != nil || !strings.Contains(out, "(runtime") {
		t.Errorf("get: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "limits", "list", "email"); err != nil || !strings.Contains(out, "tenant-*") || !strings.Contains(out, "config at line 12") {
		t.Errorf("list: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "limits", "rm", "email", "per-key", "tenant-*"); err != nil || !strings.Contains(out, "removed") {
		t.Errorf("rm: %v\n%s", err, out)
	}
	want := []string{
		`PUT /v1/queues/email/limits/per-key/keys/tenant-a {"rate":"100/s","burst":200}`,
		`GET /v1/queues/email/limits/per-key/keys/tenant-a `,
		`GET /v1/queues/email/limits `,
		`DELETE /v1/queues/email/limits/per-key/keys/tenant-%2A `,
	}
	if got := seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	submitKey := map[string]string{"SPILLWAY_SERVER": url, "SPILLWAY_ADMIN_KEY": "submit-key"}
	if _, _, err := spillctlEnv(t, submitKey, "", "limits", "list", "email"); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("list without an admin key: %v", err)
	}
	for _, args := range [][]string{{"limits"}, {"limits", "nope"}, {"limits", "get", "email"}, {"limits", "set", "email", "0", "k"}} {
		if _, _, err := spillctlEnv(t, env, "", args...); !errorsIsUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if out, _, err := spillctlEnv(t, env, "", "limits", "--help"); err != nil || !strings.Contains(out, "Usage: spillctl limits list QUEUE") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}

// fakeAdmin is an admitter's admin endpoints as spillctl sees them: a
// request without the admin key "admin-key" is 403; the others are
// recorded (seen: "METHOD escaped-path body") and answered 204 for a
// DELETE, else with answer(r) as JSON.
func fakeAdmin(t *testing.T, answer func(*http.Request) any) (url string, seen func() []string) {
	t.Helper()
	var mu sync.Mutex
	var requests []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin-key" {
			w.Header().Set("Content-Type", spillway.ProblemContentType)
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(spillway.Problem{Type: spillway.ProblemForbidden, Title: "Forbidden", Status: 403, Detail: "this key may submit and read, not administer"})
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.EscapedPath()+" "+strings.TrimSpace(string(b)))
		mu.Unlock()
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer(r))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(requests)
	}
}
