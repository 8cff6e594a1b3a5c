package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// topKeysConfig: per X-Client a first job admitted (to READY), the next
// ten queued an hour or more apart; no worker runs, so the backlog stays
// as submitted. tenant-a weighs 4. The queue "idle" never has jobs.
const topKeysConfig = `
nats: {url: %q}
http: {listen: "127.0.0.1:0", api_keys_file: %q, admin_keys_file: %q%s}
queues:
  - name: email
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 10, delay: 0}]
    backlog: {capacity: 100, leak_rate: 1/h, fairness: {weights: {tenant-a: 4}}}
  - name: idle
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 10, delay: 0}]
    backlog: {capacity: 100, leak_rate: 1/h}
`

// TestTopKeysFromARealAdmitter runs spillctl top, with an admin key (the
// keys listing is every tenant's), against an admitter
// (no workers) holding a backlog of three keys: the keys section lists
// them deepest first, with hash, depth, oldest age, weight and priority
// mix, then the release shares the drain's leader publishes, then raw
// keys once the admitter shows them; --keys bounds it, --queue selects
// one queue, --json carries it.
func TestTopKeysFromARealAdmitter(t *testing.T) {
	t.Parallel()
	const apiKey = "top-keys-test-key"
	keysFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keysFile, []byte(apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := queuetest.Start(t)
	yaml := func(extra string) string { return fmt.Sprintf(topKeysConfig, ns.URL(), keysFile, keysFile, extra) }
	svc := startAdmitter(t, admitterd.Options{Config: admittest.LoadConfig(t, yaml(""))})
	env := map[string]string{"SPILLWAY_SERVER": "http://" + svc.HTTPAddr(), "SPILLWAY_API_KEY": apiKey}

	// tenant-a: 1 admitted, then high, normal, low queued; tenant-b: 1
	// admitted, 2 queued; tenant-c: 1 admitted, 1 queued.
	for _, s := range []struct{ client, priority, want string }{
		{"tenant-a", "", "admitted"}, {"tenant-a", "high", "queued"}, {"tenant-a", "", "queued"}, {"tenant-a", "low", "queued"},
		{"tenant-b", "", "admitted"}, {"tenant-b", "low", "queued"}, {"tenant-b", "low", "queued"},
		{"tenant-c", "", "admitted"}, {"tenant-c", "high", "queued"},
	} {
		args := []string{"submit", "--queue", "email", "--data", "x", "--header", "X-Client=" + s.client}
		if s.priority != "" {
			args = append(args, "--header", "Spillway-Priority="+s.priority)
		}
		out, _, err := spillctlEnv(t, env, "", args...)
		if err != nil || !strings.HasPrefix(out, s.want) {
			t.Fatalf("submit for %s: %v %q, want %s", s.client, err, out, s.want)
		}
	}
	hashA, hashB, hashC := queue.KeyHash("tenant-a"), queue.KeyHash("tenant-b"), queue.KeyHash("tenant-c")

	top := func(args ...string) string {
		t.Helper()
		out, _, err := spillctlEnv(t, env, "", append([]string{"top", "--once", "--interval", "50ms"}, args...)...)
		if err != nil {
			t.Fatalf("top %v: %v\n%s", args, err, out)
		}
		return out
	}
	// row matches a key's line: key, depth, an age, weight, high/normal/low
	// and the release share (blank when there is none).
	row := func(key string, depth, weight int, mix, share string) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^  %s +%d +[0-9.]+m?s +%d +%s(  +%s)?$`, regexp.QuoteMeta(key), depth, weight, regexp.QuoteMeta(mix), regexp.QuoteMeta(share)))
	}
	// Two keys of three: the default of 5 is bounded to 2.
	out := top("--keys", "2")
	t.Logf("spillctl top --once --keys 2:\n%s", out)
	if !strings.Contains(out, "\nemail — top 2 of 3 keys by backlog depth\n") ||
		!regexp.MustCompile(`(?m)^  KEY HASH +DEPTH +OLDEST +WEIGHT +HIGH/NORMAL/LOW +RELEASED$`).MatchString(out) {
		t.Fatalf("no keys section for email with its heading and columns:\n%s", out)
	}
	if !row(hashA, 3, 4, "1/1/1", "").MatchString(out) || !row(hashB, 2, 1, "0/0/2", "").MatchString(out) {
		t.Fatalf("want tenant-a (3 jobs, weight 4, 1/1/1) then tenant-b (2 jobs, 0/0/2), no release share:\n%s", out)
	}
	if strings.Index(out, hashA) > strings.Index(out, hashB) || strings.Contains(out, hashC) || strings.Contains(out, "\nidle —") {
		t.Fatalf("want tenant-a before tenant-b, tenant-c left out, no section for the empty backlog of idle:\n%s", out)
	}
	if i, j := strings.Index(out, "QUEUE "), strings.Index(out, "\nemail — top"); i < 0 || j < i {
		t.Fatalf("the keys section is not under the queue table:\n%s", out)
	}

	// The drain's leader publishes releases per key: each key's share.
	kv, err := pace.OpenPacerBucket(t.Context(), ns.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-2 * time.Second).UTC().Truncate(time.Second)
	doc := fmt.Sprintf(`{"at": %q, "window_s": 60, "releases": {%q: 3, %q: 1}}`, at.Format(time.RFC3339), hashA, hashC)
	if _, err := kv.Put(t.Context(), worker.KeyReleasesKey("email"), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	// The admitter's listing is cached for a moment, for any top: ask
	// until it reads the releases anew.
	heading := fmt.Sprintf("\nemail — top 3 of 3 keys by backlog depth; released: share of the jobs released in the 60s to %s\n", at.Local().Format("15:04:05"))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out = top() // the default: 5
		if strings.Contains(out, heading) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: want the heading %q:\n%s", heading, out)
		}
	}
	t.Logf("spillctl top --once, with release counts:\n%s", out)
	if !row(hashA, 3, 4, "1/1/1", "75.0%").MatchString(out) || !row(hashB, 2, 1, "0/0/2", "0.0%").MatchString(out) || !row(hashC, 1, 1, "1/0/0", "25.0%").MatchString(out) {
		t.Fatalf("want shares 75%%, 0%% and 25%%:\n%s", out)
	}

	// --json carries the listing as the admitter gives it.
	var f topFrame
	if out := top("--json", "--keys", "3"); json.Unmarshal([]byte(out), &f) != nil || len(f.Keys) != 1 || f.Keys[0].Queue != "email" ||
		f.Keys[0].TotalKeys != 3 || len(f.Keys[0].Keys) != 3 || f.Keys[0].Keys[0].KeyHash != hashA || f.Keys[0].Keys[0].ReleaseShare == nil {
		t.Fatalf("top --json: %+v\n%s", f.Keys, out)
	}

	// --keys 0 hides the section.
	if out := top("--keys", "0"); strings.Contains(out, "KEY HASH") || strings.Contains(out, "email — top") {
		t.Fatalf("--keys 0 shows keys:\n%s", out)
	}

	// --queue selects one queue: its row and its keys only.
	out = top("--queue", "idle")
	if !strings.Contains(out, "\nidle — no jobs in the backlog\n") || regexp.MustCompile(`(?m)^email `).MatchString(out) || strings.Contains(out, hashA) {
		t.Fatalf("--queue idle: want idle's row and its empty backlog, nothing of email:\n%s", out)
	}
	if _, _, err := spillctlEnv(t, env, "", "top", "--once", "--interval", "50ms", "--queue", "nope"); err == nil || !strings.Contains(err.Error(), `has no queue "nope"`) {
		t.Fatalf("--queue nope: %v", err)
	}

	// With http.show_raw_keys the admitter gives the keys themselves.
	if err := svc.Reload(t.Context(), admittest.LoadConfig(t, yaml(", show_raw_keys: true"))); err != nil {
		t.Fatal(err)
	}
	out = top("--queue", "email", "--keys", "4")
	t.Logf("spillctl top --once --queue email, raw keys:\n%s", out)
	if !regexp.MustCompile(`(?m)^  KEY +DEPTH`).MatchString(out) || !row("tenant-a", 3, 4, "1/1/1", "75.0%").MatchString(out) || !row("tenant-c", 1, 1, "1/0/0", "25.0%").MatchString(out) {
		t.Fatalf("with show_raw_keys: want the raw keys:\n%s", out)
	}

	// Without the API key the listing is refused like the rest.
	if _, _, err := spillctlEnv(t, map[string]string{"SPILLWAY_SERVER": env["SPILLWAY_SERVER"]}, "", "top", "--once", "--interval", "50ms"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("top without the API key: %v", err)
	}
}

// TestTopKeysFlags: --keys takes 0 to the admitter's bound, and the
// error names the flag and what it wants.
func TestTopKeysFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--keys", "-1"}, "--keys -1: want 0 (no keys) to 1000"},
		{[]string{"--keys", "1001"}, "--keys 1001: want 0 (no keys) to 1000"},
		{[]string{"--keys", "many"}, `invalid value "many" for flag -keys`},
		{[]string{"--queue", ""}, "--queue: want a queue name"},
	} {
		_, _, err := spillctl(t, "", append([]string{"top", "--once"}, c.args...)...)
		if code, msg := exitStatus(err); code != exitUsage || !strings.Contains(msg, c.says) {
			t.Errorf("top %v: exit %d %q, want a usage error saying %q", c.args, code, msg, c.says)
		}
	}
}

// TestTopKeysFormat: a queue whose keys could not be read says why, an
// empty backlog says so, and a raw key a terminal could act on is quoted.
func TestTopKeysFormat(t *testing.T) {
	t.Parallel()
	odd := "a b\x1b[2J"
	share := 1.0
	got := formatKeys([]topKeys{
		{KeyList: spillway.KeyList{Queue: "a"}, Error: "the admitter at http://x answered 503 Service Unavailable"},
		{KeyList: spillway.KeyList{Queue: "b"}},
		{KeyList: spillway.KeyList{Queue: "c", TotalKeys: 1, Keys: []spillway.KeyInfo{
			{KeyHash: "0123456789abcdef", Key: &odd, Depth: 12, OldestAgeMS: 61_000, Weight: 2, Priority: spillway.PriorityMix{Normal: 12}, ReleaseShare: &share},
		}}},
	}, time.UTC)
	want := "\na — keys unavailable: the admitter at http://x answered 503 Service Unavailable\n" +
		"\nb — no jobs in the backlog\n" +
		"\nc — top 1 of 1 key by backlog depth\n" +
		"  KEY           DEPTH  OLDEST  WEIGHT  HIGH/NORMAL/LOW  RELEASED\n" +
		"  \"a b\\x1b[2J\"     12   1m01s       2           0/12/0    100.0%\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}
