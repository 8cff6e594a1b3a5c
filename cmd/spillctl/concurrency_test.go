package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// spillctl concurrency sends each subcommand's method, path and max with
// the admin key, and prints the answers; a submit key's 403 says to use
// an admin key; a mistake on the command line is a usage error.
func TestConcurrencyCommands(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 16, 0, 0, 0, time.UTC)
	url, seen := fakeAdmin(t, func(r *http.Request) any {
		if strings.HasSuffix(r.URL.Path, "/concurrency") {
			return spillway.ConcurrencyList{Queue: "email", Entries: []spillway.ConcurrencyEntry{{Name: "per-tenant",
				KeyedBy: "header:X-Tenant", Max: 2, Overrides: []spillway.ConcurrencyOverride{{Key: "tenant-*", Max: 4, Source: "config", Line: 12}}}}}
		}
		return spillway.KeyConcurrencyMax{Queue: "email", Concurrency: "per-tenant", Key: "tenant-a", Max: 10,
			Source: "runtime", Pattern: "tenant-a", By: "sha256:0123456789ab", At: &at}
	})
	env := map[string]string{"SPILLWAY_SERVER": url, "SPILLWAY_ADMIN_KEY": "admin-key"}

	out, _, err := spillctlEnv(t, env, "", "concurrency", "set", "email", "per-tenant", "tenant-a", "--max", "10")
	if err != nil || !strings.Contains(out, "email/per-tenant tenant-a: max 10 (runtime by sha256:0123456789ab") {
		t.Errorf("set: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "concurrency", "get", "email", "per-tenant", "tenant-a"); err != nil || !strings.Contains(out, "max 10 (runtime") {
		t.Errorf("get: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "concurrency", "list", "email"); err != nil || !strings.Contains(out, "tenant-*") || !strings.Contains(out, "config at line 12") {
		t.Errorf("list: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "concurrency", "list", "email", "--json"); err != nil || !strings.Contains(out, `"entries"`) {
		t.Errorf("list --json: %v\n%s", err, out)
	}
	if out, _, err = spillctlEnv(t, env, "", "concurrency", "rm", "email", "per-tenant", "tenant-*"); err != nil || !strings.Contains(out, "removed") {
		t.Errorf("rm: %v\n%s", err, out)
	}
	want := []string{
		`PUT /v1/queues/email/concurrency/per-tenant/keys/tenant-a {"max":10}`,
		`GET /v1/queues/email/concurrency/per-tenant/keys/tenant-a `,
		`GET /v1/queues/email/concurrency `,
		`GET /v1/queues/email/concurrency `,
		`DELETE /v1/queues/email/concurrency/per-tenant/keys/tenant-%2A `,
	}
	if got := seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	submitKey := map[string]string{"SPILLWAY_SERVER": url, "SPILLWAY_ADMIN_KEY": "submit-key"}
	if _, _, err := spillctlEnv(t, submitKey, "", "concurrency", "list", "email"); err == nil || !strings.Contains(err.Error(), "403") ||
		!strings.Contains(err.Error(), "the concurrency endpoints take an admin key") {
		t.Errorf("list without an admin key: %v", err)
	}
	for _, args := range [][]string{{"concurrency"}, {"concurrency", "nope"}, {"concurrency", "get", "email"}, {"concurrency", "set", "email", "per-tenant", "k"}} {
		if _, _, err := spillctlEnv(t, env, "", args...); !errorsIsUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if out, _, err := spillctlEnv(t, env, "", "concurrency", "--help"); err != nil || !strings.Contains(out, "Usage: spillctl concurrency list QUEUE") || !strings.Contains(out, "-max N") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}
