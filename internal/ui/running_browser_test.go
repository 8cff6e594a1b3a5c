package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// boundedYAML: one job of a client runs at a time; the backlog stays
// empty (every job is admitted), so only jobs in flight make the page
// read the queue's keys.
const boundedYAML = `
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: bounded
    limits: [{key: "header:X-Client-Id", algorithm: token_bucket, rate: 10/s, burst: 10}]
    concurrency: [{name: per-client, key: "header:X-Client-Id", max: 1}]
    backlog: {capacity: 10, leak_rate: 1/s}
    handler: {log: true}
`

// shownRunning is what a queue's "Running per key" table shows.
type shownRunning struct {
	Title string                 `json:"title"`
	Shown bool                   `json:"shown"`
	Rows  []map[string]shownItem `json:"rows"`
	Viol  []string               `json:"violations"`
}

func lookRunning(ctx context.Context, t *testing.T, q string) shownRunning {
	t.Helper()
	return run(ctx, t, "reading the running keys", chromedp.Evaluate[shownRunning](fmt.Sprintf(`(() => {
  const q = %q;
  const card = [...document.querySelectorAll("article.queue")].find((e) => e.dataset.queue === q);
  const out = {title: "", shown: false, rows: [], violations: window.__cspViolations || []};
  const table = card && card.querySelector("section.keys table.running");
  if (!table) return out;
  out.shown = !table.hidden;
  out.title = card.querySelector("section.keys .title.running").textContent;
  out.rows = [...table.querySelectorAll("tbody tr")].map((tr) =>
    Object.fromEntries([...tr.cells].map((td) => [td.dataset.col, {text: td.textContent, value: td.dataset.value || ""}])));
  return out;
})()`, q)))
}

// TestPageShowsRunningPerKey: a queue runs at most one job of a client at
// once; while its handler holds two clients' jobs (and the first
// client's second job waits for its slot), the card lists, under the
// empty backlog's note, each key's running count from the concurrency
// part of GET /v1/queues/{queue}/keys; once the jobs are done the table
// goes away.
func TestPageShowsRunningPerKey(t *testing.T) {
	ctx := browser(t)
	release := make(chan struct{})
	started := make(chan string, 3)
	hold := func(ctx context.Context, j *queue.Job) error {
		select {
		case started <- j.ID:
		default: // a delivery the test does not wait for
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	svc := startAdmitter(t, fmt.Sprintf(boundedYAML, t.TempDir()), map[string]worker.Handler{"bounded": hold})
	released := false
	releaseAll := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(releaseAll) // before the admitter stops (cleanups run last first)

	for _, client := range []string{"busy", "busy", "other"} {
		if st, err := svc.submit(t.Context(), "bounded", client); err != nil || st != spillway.Admitted {
			t.Fatalf("submitting for %s: %v %v, want admitted", client, st, err)
		}
	}
	// Two start (one per client); busy's second job waits for the slot.
	for range 2 {
		select {
		case <-started:
		case <-time.After(15 * time.Second):
			t.Fatal("the handler did not start two jobs within 15s")
		}
	}
	busy, other := queue.KeyHash("busy"), queue.KeyHash("other")

	run(ctx, t, "loading /ui", chromedp.Navigate(svc.base+"/ui"))
	var r shownRunning
	for deadline := time.Now().Add(15 * time.Second); ; {
		r = lookRunning(ctx, t, "bounded")
		if r.Shown && len(r.Rows) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not show two keys running within 15s; it shows %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("running per key: %q, rows %+v", r.Title, r.Rows)
	if !strings.Contains(r.Title, "Running per key under the queue's concurrency bounds") {
		t.Errorf("title %q, want it to say what the table is", r.Title)
	}
	var hashes []string
	for i, row := range r.Rows {
		hashes = append(hashes, row["key"].Value)
		if row["entry"].Text != "per-client" || row["running"].Value != "1" || row["running"].Text != "1" || row["key"].Text != row["key"].Value {
			t.Errorf("row %d: %+v, want entry per-client, the key's hash, running 1", i+1, row)
		}
	}
	slices.Sort(hashes)
	want := []string{busy, other}
	slices.Sort(want)
	if !slices.Equal(hashes, want) {
		t.Errorf("keys shown %v, want busy's and other's hashes %v", hashes, want)
	}
	if k := lookKeys(ctx, t, "bounded"); k.Table || k.None != "No jobs in the backlog." {
		t.Errorf("the top keys of an empty backlog show %+v, want no table and \"No jobs in the backlog.\"", k)
	}

	// The page shows what the endpoint says.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, svc.base+"/v1/queues/bounded/keys", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := svc.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list spillway.KeyList
	err = json.NewDecoder(resp.Body).Decode(&list)
	_ = resp.Body.Close()
	if err != nil || len(list.Concurrency) != 2 {
		t.Fatalf("GET /v1/queues/bounded/keys: %v %+v, want two keys running", err, list)
	}
	for _, c := range list.Concurrency {
		if c.Name != "per-client" || c.Running != 1 || !slices.Contains(want, c.KeyHash) {
			t.Errorf("GET /v1/queues/bounded/keys: concurrency %+v, want per-client, running 1, busy's or other's hash", c)
		}
	}
	saveArtifact(t, "ui-running-per-key.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))

	// Done: the third job runs and ends too, and the table goes away.
	releaseAll()
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("busy's second job did not start within 15s of the first one's end")
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		r = lookRunning(ctx, t, "bounded")
		if !r.Shown && len(r.Rows) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running table did not go away within 15s of the jobs' end; it shows %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(r.Viol) > 0 {
		t.Errorf("the page broke its Content-Security-Policy: %q", r.Viol)
	}
}
