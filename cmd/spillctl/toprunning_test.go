package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestTopRunningFormat: under a queue's backlog keys, the keys running
// jobs under its concurrency entries, as listed; none running, or a
// listing that failed, add nothing.
func TestTopRunningFormat(t *testing.T) {
	t.Parallel()
	got := formatKeysRunning([]topKeys{
		{KeyList: spillway.KeyList{Queue: "a", Concurrency: []spillway.KeyConcurrency{{Name: "x", KeyHash: "00", Running: 1}}},
			Error: "the admitter at http://x answered 503 Service Unavailable"},
		{KeyList: spillway.KeyList{Queue: "b", Concurrency: []spillway.KeyConcurrency{
			{Name: "per-tenant", KeyHash: "0123456789abcdef", Running: 12},
			{Name: "global-cap", KeyHash: "fedcba9876543210", Running: 3},
		}}},
		{KeyList: spillway.KeyList{Queue: "c"}},
	}, time.UTC)
	want := "\na — keys unavailable: the admitter at http://x answered 503 Service Unavailable\n" +
		"\nb — no jobs in the backlog\n" +
		"\nb — 2 keys running jobs under the concurrency bounds, across all workers\n" +
		"  ENTRY       KEY HASH          RUNNING\n" +
		"  per-tenant  0123456789abcdef       12\n" +
		"  global-cap  fedcba9876543210        3\n" +
		"\nc — no jobs in the backlog\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// runningConfig: one job of a client runs at a time, every job admitted.
const runningConfig = `
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: bounded
    limits: [{key: "header:X-Client", algorithm: token_bucket, rate: 10/s, burst: 10}]
    concurrency: [{name: per-client, key: "header:X-Client", max: 1}]
    backlog: {capacity: 10, leak_rate: 1/s}
    handler: {log: true}
`

// TestTopShowsRunningPerKey runs spillctl top --once --queue against a
// dev-mode admitter whose handler holds two clients' jobs (the first
// client's second job waits for its slot): the keys section lists each
// key running 1 under the entry per-client, and --json carries the
// listing's concurrency part.
func TestTopShowsRunningPerKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	hold := func(ctx context.Context, _ *queue.Job) error {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	svc := startAdmitter(t, admitterd.Options{
		Config: admittest.LoadConfig(t, fmt.Sprintf(runningConfig, t.TempDir())), Dev: true,
		Handlers: map[string]worker.Handler{"bounded": hold},
	})
	t.Cleanup(func() { close(release) }) // runs first: the jobs end, then the admitter stops
	env := map[string]string{"SPILLWAY_SERVER": "http://" + svc.HTTPAddr()}
	for _, client := range []string{"busy", "busy", "other"} {
		out, _, err := spillctlEnv(t, env, "", "submit", "--queue", "bounded", "--data", "x", "--header", "X-Client="+client)
		if err != nil || !strings.HasPrefix(out, "admitted") {
			t.Fatalf("submitting for %s: %q %v, want admitted", client, out, err)
		}
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(15 * time.Second):
			t.Fatal("the handler did not start two jobs within 15s")
		}
	}

	busy, other := queue.KeyHash("busy"), queue.KeyHash("other")
	var out string
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; {
		out, _, err = spillctlEnv(t, env, "", "top", "--once", "--queue", "bounded")
		if err == nil && strings.Contains(out, "2 keys running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top did not list two keys running within 15s: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("spillctl top --once --queue bounded:\n%s", out)
	_, running, ok := strings.Cut(out, "\nbounded — 2 keys running jobs under the concurrency bounds, across all workers\n")
	if !ok {
		t.Fatalf("no running heading in:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(running, "\n"), "\n")
	if len(lines) != 3 || strings.Fields(lines[0])[0] != "ENTRY" {
		t.Fatalf("running section %q, want a heading and two keys", running)
	}
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "per-client" || f[2] != "1" || (f[1] != busy && f[1] != other) {
			t.Errorf("running line %q, want per-client, busy's or other's hash, 1", l)
		}
		seen[f[1]] = true
	}
	if !seen[busy] || !seen[other] {
		t.Errorf("running keys %v, want busy (%s) and other (%s)", seen, busy, other)
	}

	js, _, err := spillctlEnv(t, env, "", "top", "--once", "--queue", "bounded", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var frame struct {
		Keys []spillway.KeyList `json:"keys"`
	}
	if err := json.Unmarshal([]byte(js), &frame); err != nil || len(frame.Keys) != 1 || len(frame.Keys[0].Concurrency) != 2 {
		t.Errorf("top --json: %v, keys %+v; want bounded's listing with two keys running\n%s", err, frame.Keys, js)
	}
}
