package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/ui"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// chromium finds Debian's headless-capable Chromium: $SPILLWAY_CHROMIUM,
// then chromium or chromium-browser on PATH, then /usr/bin/chromium.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SPILLWAY_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SPILLWAY_CHROMIUM=%s: %v (unset it to use Debian's: apt-get install chromium)", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("the /ui browser tests need Chromium and found none (looked at $SPILLWAY_CHROMIUM, chromium and chromium-browser on PATH, /usr/bin/chromium): apt-get install chromium")
	return ""
}

// browser starts a headless Chromium for the test and returns a tab's
// context. Every page loaded in it records its Content-Security-Policy
// violations in window.__cspViolations.
func browser(t *testing.T) context.Context {
	t.Helper()
	var out bytes.Buffer
	var outMu sync.Mutex
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // tests run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(lockedWriter{&outMu, &out}),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() {
			outMu.Lock()
			var keep []string
			for l := range strings.Lines(out.String()) {
				if !strings.Contains(l, "dbus") {
					keep = append(keep, l)
				}
			}
			t.Logf("chromium output (D-Bus complaints left out):\n%s", strings.Join(keep, ""))
			outMu.Unlock()
		}
	})
	// The first Run starts the browser; it must not carry a timeout.
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI));`,
		})
		return err
	}))
	if err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return ctx
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// run runs one action with a deadline.
func run[T any](ctx context.Context, t *testing.T, what string, a chromedp.Action[T]) T {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(actx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// shown is what the page shows: its connection state, how many polls it
// has completed, and each field of one queue.
type shown struct {
	Polls      int                  `json:"polls"`
	State      string               `json:"state"`
	Banner     string               `json:"banner"`
	AuthShown  bool                 `json:"auth"`
	Fields     map[string]shownItem `json:"fields"`
	DepthPaths int                  `json:"depthPaths"`
	CapLines   int                  `json:"capLines"`
	Violations []string             `json:"violations"`
}

type shownItem struct {
	Text  string `json:"text"`
	Value string `json:"value"`
}

func (s shown) number(t *testing.T, field string) float64 {
	t.Helper()
	it, ok := s.Fields[field]
	if !ok {
		t.Fatalf("the page shows no field %q: %+v", field, s.Fields)
	}
	v, err := strconv.ParseFloat(it.Value, 64)
	if err != nil {
		t.Fatalf("field %q: data-value %q is not a number (text %q)", field, it.Value, it.Text)
	}
	return v
}

func look(ctx context.Context, t *testing.T, q string) shown {
	t.Helper()
	return run(ctx, t, "reading the page", chromedp.Evaluate[shown](fmt.Sprintf(`(() => {
  const q = %q, fields = {};
  const card = [...document.querySelectorAll("article.queue")].find((e) => e.dataset.queue === q);
  for (const e of document.querySelectorAll("[data-field]")) {
    if (e.dataset.queue === q) fields[e.dataset.field] = {text: e.textContent, value: e.dataset.value || ""};
  }
  return {
    polls: Number(document.body.dataset.polls), state: document.body.dataset.state,
    banner: document.getElementById("banner").hidden ? "" : document.getElementById("banner").textContent,
    auth: !document.getElementById("auth").hidden, fields,
    depthPaths: card ? card.querySelectorAll("svg path.depth").length : 0,
    capLines: card ? card.querySelectorAll("svg line.cap").length : 0,
    violations: window.__cspViolations || [],
  };
})()`, q)))
}

// waitPage polls the page until cond holds.
func waitPage(ctx context.Context, t *testing.T, q, what string, timeout time.Duration, cond func(shown) bool) shown {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := look(ctx, t, q)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not show %s within %v; it shows %+v", what, timeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// service is an in-process dev-mode admitter.
type service struct {
	*admitterd.Service
	base   string
	client *http.Client
	once   sync.Once
}

func startAdmitter(t *testing.T, yaml string, handlers map[string]worker.Handler) *service {
	t.Helper()
	cfg := admittest.LoadConfig(t, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := admitterd.Start(ctx, admitterd.Options{Config: cfg, Dev: true, Handlers: handlers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("starting the admitter: %v", err)
	}
	svc := &service{Service: s, base: "http://" + s.HTTPAddr(), client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(func() { svc.shutdown(t) })
	return svc
}

// shutdown stops the admitter, once.
func (s *service) shutdown(t *testing.T) {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		s.client.CloseIdleConnections()
	})
}

func (s *service) queue(t *testing.T, name, key string) spillway.QueueInfo {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+"/v1/queues/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/queues/%s: %v", name, err)
	}
	defer resp.Body.Close()
	var q spillway.QueueInfo
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /v1/queues/%s: %d %s", name, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil {
		t.Fatalf("GET /v1/queues/%s: %v", name, err)
	}
	return q
}

// submit posts one job from client and returns its verdict.
func (s *service) submit(ctx context.Context, q, client string) (spillway.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/queues/"+q+"/jobs", strings.NewReader(`{"n":1}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-Id", client)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	// A verdict answers a SubmitReply; a 429 a problem document, whose
	// "status" is the HTTP code.
	var r struct {
		Status any `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", fmt.Errorf("%d: %w", resp.StatusCode, err)
	}
	switch v := r.Status.(type) {
	case string:
		return spillway.Status(v), nil
	case float64:
		if resp.StatusCode == http.StatusTooManyRequests {
			return spillway.Rejected, nil
		}
	}
	return "", fmt.Errorf("answer %d without a verdict (status %v)", resp.StatusCode, r.Status)
}

// slow is a handler that takes a while, so jobs stay in flight.
func slow(ctx context.Context, _ *queue.Job) error {
	select {
	case <-time.After(300 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// saveArtifact keeps a file in the test's artifact directory (kept with
// go test -artifacts) and in $SPILLWAY_ARTIFACTS when that is set.
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("SPILLWAY_ARTIFACTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("artifact: %s", path)
	}
}

const demoYAML = `
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"%s}
queues:
  - name: demo
    limits: [{key: "header:X-Client-Id", algorithm: leaky_bucket, rate: 2/s, burst: 30, delay: 5}]
    backlog: {capacity: 40, leak_rate: 2/s}
    handler: {log: true}
  - name: reports-nightly
    limits: [{key: global, algorithm: token_bucket, rate: 10/s, burst: 10}]
    backlog: {capacity: 500, per_key_capacity: 50, leak_rate: 1/s}
    handler: {log: true}
`

// TestPageUnderLoad loads /ui from a dev-mode admitter while one client
// floods a queue whose jobs are slow and whose backlog leaks at 2/s: the
// page shows the queue, its depth as GET /v1/queues has it, the real
// capacity and leak rate, and non-zero verdict rates; when the admitter
// goes away it says so and keeps the last figures.
func TestPageUnderLoad(t *testing.T) {
	ctx := browser(t)
	svc := startAdmitter(t, fmt.Sprintf(demoYAML, t.TempDir(), ""), map[string]worker.Handler{"demo": slow, "reports-nightly": slow})

	run(ctx, t, "loading /ui", chromedp.Navigate(svc.base+"/ui"))
	// Two polls before the load starts: the first verdict rates are then
	// already deltas over the load.
	waitPage(ctx, t, "demo", "the demo queue after two polls", 20*time.Second, func(s shown) bool {
		return s.State == "live" && s.Polls >= 2 && s.Fields["depth"].Text != ""
	})

	// One client, about 16 jobs a second for 5 s: the first few are
	// admitted, then the bucket queues jobs up to its burst, then rejects.
	loadCtx, stopLoad := context.WithCancel(t.Context())
	verdicts := map[spillway.Status]int{}
	var loadErr error
	loadDone := make(chan struct{})
	t.Cleanup(func() { stopLoad(); <-loadDone }) // before the admitter stops
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(60 * time.Millisecond)
		defer tick.Stop()
		end := time.After(5 * time.Second)
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-end:
				return
			case <-tick.C:
			}
			v, err := svc.submit(loadCtx, "demo", "flood")
			if err != nil {
				loadErr = err
				return
			}
			verdicts[v]++
		}
	}()

	seen := map[string]float64{}
	var last shown
	shotAt := time.Now().Add(3500 * time.Millisecond) // well into the load
	for loading := true; loading; {
		select {
		case <-loadDone:
			loading = false
		case <-time.After(150 * time.Millisecond):
		}
		last = look(ctx, t, "demo")
		for _, v := range []string{"admitted", "queued", "rejected"} {
			if it := last.Fields["rate-"+v]; it.Value != "" {
				r, err := strconv.ParseFloat(it.Value, 64)
				if err != nil {
					t.Fatalf("rate-%s: data-value %q", v, it.Value)
				}
				seen[v] = max(seen[v], r)
			}
		}
		if !shotAt.IsZero() && time.Now().After(shotAt) {
			saveArtifact(t, "ui-under-load.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))
			shotAt = time.Time{}
		}
	}
	if loadErr != nil {
		t.Fatalf("the load: %v", loadErr)
	}
	t.Logf("load verdicts: %v; highest rates the page showed: %v", verdicts, seen)
	for _, v := range []spillway.Status{spillway.Admitted, spillway.Queued, spillway.Rejected} {
		if verdicts[v] == 0 {
			t.Fatalf("the load got no %s verdict (%v): the test's limits do not make the backlog hold jobs", v, verdicts)
		}
		if seen[string(v)] <= 0 {
			t.Errorf("while the load ran the page never showed a %s rate above 0 (it showed %v)", v, seen)
		}
	}

	// The load has stopped, so the backlog only shrinks (at the leak
	// rate): a poll the page starts after the first read shows a depth
	// between that read and one taken after the page shows it.
	before := svc.queue(t, "demo", "")
	polls := look(ctx, t, "demo").Polls
	got := waitPage(ctx, t, "demo", "two more polls", 10*time.Second, func(s shown) bool { return s.Polls >= polls+2 })
	after := svc.queue(t, "demo", "")
	depth := got.number(t, "depth")
	t.Logf("depth: /v1/queues %d before, page %v (text %q), /v1/queues %d after", before.Depth, depth, got.Fields["depth"].Text, after.Depth)
	if before.Depth <= 0 {
		t.Fatalf("the backlog is empty right after the load (%+v): the test's limits do not make it hold jobs", before)
	}
	if depth < float64(after.Depth) || depth > float64(before.Depth) {
		t.Errorf("the page shows depth %v, want between %d (after) and %d (before)", depth, after.Depth, before.Depth)
	}
	if depth <= 0 {
		t.Errorf("the page shows depth %v under a backlog of %d", depth, before.Depth)
	}
	if got.Fields["depth"].Text != strconv.FormatFloat(depth, 'f', -1, 64) {
		t.Errorf("the depth reads %q but its value is %v", got.Fields["depth"].Text, depth)
	}
	if c := got.number(t, "capacity"); c != float64(before.Capacity) || c != 40 {
		t.Errorf("the page shows capacity %v, /v1/queues %d, the config 40", c, before.Capacity)
	}
	if l := got.number(t, "leak"); l != before.LeakPerSecond || l != 2 {
		t.Errorf("the page shows a leak of %v/s, /v1/queues %v/s, the config 2/s", l, before.LeakPerSecond)
	}
	if txt := got.Fields["leak"].Text; txt != before.LeakRate {
		t.Errorf("the page shows the leak rate as %q, /v1/queues as %q", txt, before.LeakRate)
	}
	if got.DepthPaths != 1 || got.CapLines != 1 {
		t.Errorf("the demo chart has %d depth lines and %d capacity lines, want 1 and 1", got.DepthPaths, got.CapLines)
	}
	if len(got.Violations) > 0 {
		t.Errorf("the page broke its Content-Security-Policy: %q", got.Violations)
	}
	other := look(ctx, t, "reports-nightly")
	if c := other.number(t, "capacity"); c != 500 {
		t.Errorf("the second queue shows capacity %v, want 500", c)
	}

	saveArtifact(t, "ui-after-load.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))

	// The admitter goes away: the page says so and keeps the last data.
	kept := look(ctx, t, "demo").Fields["depth"].Text
	svc.shutdown(t)
	down := waitPage(ctx, t, "demo", "the disconnected state", 15*time.Second, func(s shown) bool { return s.State == "disconnected" })
	if !strings.Contains(down.Banner, "retrying") || down.Fields["depth"].Text != kept {
		t.Errorf("disconnected: banner %q, depth %q; want a banner saying it retries and the last depth %q", down.Banner, down.Fields["depth"].Text, kept)
	}
	saveArtifact(t, "ui-disconnected.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))
}

// TestPageAsksForAPIKey: with http.api_keys_file set, /v1/queues answers
// 401 and the page asks for a key; a wrong key is refused, the right one
// is kept in sessionStorage and sent as a bearer token.
func TestPageAsksForAPIKey(t *testing.T) {
	const key = "ui-test-key-1234"
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	svc := startAdmitter(t, fmt.Sprintf(demoYAML, t.TempDir(), fmt.Sprintf(", api_keys_file: %q", keys)), nil)

	run(ctx, t, "loading /ui", chromedp.Navigate(svc.base+"/ui"))
	s := waitPage(ctx, t, "demo", "the API key form", 20*time.Second, func(s shown) bool { return s.State == "unauthorized" && s.AuthShown })
	if len(s.Fields) != 0 {
		t.Errorf("without a key the page shows queue figures: %+v", s.Fields)
	}
	saveArtifact(t, "ui-api-key-form.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))
	enter := func(k string) {
		t.Helper()
		run(ctx, t, "entering a key", chromedp.Steps(
			chromedp.WaitVisible(chromedp.CSS("#apikey")),
			chromedp.SendKeys(chromedp.CSS("#apikey"), k),
			chromedp.Click(chromedp.CSS("#auth-form button")),
		))
	}
	enter("wrong-key")
	waitPage(ctx, t, "demo", "the wrong key refused", 10*time.Second, func(s shown) bool { return s.State == "unauthorized" && s.AuthShown })
	refused := run(ctx, t, "reading the form", chromedp.Evaluate[string](`document.getElementById("auth-why").textContent`))
	if !strings.Contains(refused, "refused") {
		t.Errorf("after a wrong key the form says %q, want it to say the key was refused", refused)
	}

	enter(key)
	s = waitPage(ctx, t, "demo", "the queue after the right key", 15*time.Second, func(s shown) bool {
		return s.State == "live" && !s.AuthShown && s.Fields["capacity"].Value != ""
	})
	if c := s.number(t, "capacity"); c != float64(svc.queue(t, "demo", key).Capacity) {
		t.Errorf("the page shows capacity %v, /v1/queues %d", c, svc.queue(t, "demo", key).Capacity)
	}
	stored := run(ctx, t, "reading sessionStorage", chromedp.Evaluate[string](`sessionStorage.getItem("spillway.apiKey")`))
	if stored != key {
		t.Errorf("sessionStorage holds %q, want the key", stored)
	}
	if len(s.Violations) > 0 {
		t.Errorf("the page broke its Content-Security-Policy: %q", s.Violations)
	}
	saveArtifact(t, "ui-api-key.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))
}

// TestPageParsesMetrics runs the page's parser of the Prometheus text
// format in the browser, on label values that need unescaping and on
// metrics that only share the name's prefix.
func TestPageParsesMetrics(t *testing.T) {
	ctx := browser(t)
	srv := startPageServer(t)
	run(ctx, t, "loading /ui", chromedp.Navigate(srv+"/ui"))
	exposition := strings.Join([]string{
		`# HELP spillway_decisions_total Decisions.`,
		`# TYPE spillway_decisions_total counter`,
		`spillway_decisions_total{queue="a",reason="limit",verdict="admitted"} 3`,
		`spillway_decisions_total{queue="a",reason="excess",verdict="queued"} 4`,
		`spillway_decisions_total{queue="a",reason="backlog_full",verdict="rejected"} 5`,
		`spillway_decisions_total{queue="a",reason="limit",verdict="rejected"} 6 1712345678000`,
		`spillway_decisions_total{queue="b\"x\\y,z=}",reason="limit",verdict="admitted"} 1.5e1`,
		`spillway_decisions_totally_other{queue="a",verdict="admitted"} 100`,
		`spillway_decision_duration_seconds_count{queue="a"} 7`,
		`spillway_decisions_total{queue="a",verdict="admitted",reason="limit"} NaN`,
	}, "\n")
	arg, err := json.Marshal(exposition)
	if err != nil {
		t.Fatal(err)
	}
	got := run(ctx, t, "parsing", chromedp.Evaluate[map[string]float64](`Object.fromEntries([...window.spillway.decisionCounts(`+string(arg)+`)].map(([k, v]) => [k.replace("\u0000", "|"), v]))`))
	want := map[string]float64{"a|admitted": 3, "a|queued": 4, "a|rejected": 11, `b"x\y,z=}|admitted`: 15}
	if len(got) != len(want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("count %q = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// startPageServer serves only the page: the parser test needs its script,
// not an admitter.
func startPageServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(ui.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

const keysYAML = `
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0", api_keys_file: %q, admin_keys_file: %q}
queues:
  - name: tenants
    limits: [{key: "header:X-Client-Id", algorithm: leaky_bucket, rate: 1/h, burst: 10, delay: 0}]
    backlog: {capacity: 40, leak_rate: 1/h, fairness: {weights: {flood: 3}}}
    handler: {log: true}
  - name: quiet
    limits: [{key: global, algorithm: token_bucket, rate: 10/s, burst: 10}]
    backlog: {capacity: 10, leak_rate: 1/s}
    handler: {log: true}
`

// shownKeys is what a queue's "Top keys" section shows.
type shownKeys struct {
	Title string        `json:"title"`
	None  string        `json:"none"`
	Table bool          `json:"table"`
	Rows  []shownKeyRow `json:"rows"`
	State string        `json:"state"`
	Viol  []string      `json:"violations"`
}

type shownKeyRow struct {
	Hash  string               `json:"hash"`
	Cells map[string]shownItem `json:"cells"`
}

func lookKeys(ctx context.Context, t *testing.T, q string) shownKeys {
	t.Helper()
	return run(ctx, t, "reading the top keys", chromedp.Evaluate[shownKeys](fmt.Sprintf(`(() => {
  const q = %q;
  const card = [...document.querySelectorAll("article.queue")].find((e) => e.dataset.queue === q);
  const out = {title: "", none: "", table: false, rows: [], state: document.body.dataset.state, violations: window.__cspViolations || []};
  const sec = card && card.querySelector("section.keys");
  if (!sec) return out;
  const none = sec.querySelector(".none"), table = sec.querySelector("table");
  out.title = sec.querySelector(".title").textContent;
  out.none = none.hidden ? "" : none.textContent;
  out.table = !table.hidden;
  out.rows = [...table.querySelectorAll("tbody tr")].map((tr) => ({hash: tr.dataset.keyHash,
    cells: Object.fromEntries([...tr.cells].map((td) => [td.dataset.col, {text: td.textContent, value: td.dataset.value || ""}]))}));
  return out;
})()`, q)))
}

// submitAs posts one job from client with a priority (empty: none) and an
// API key, and fails the test unless it gets want.
func (s *service) submitAs(t *testing.T, q, client, priority, apiKey string, want spillway.Status) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+"/v1/queues/"+q+"/jobs", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Client-Id", client)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if priority != "" {
		req.Header.Set(spillway.HeaderPriority, priority)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r spillway.SubmitReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != want {
		t.Fatalf("submitting for %s: %d %+v (%v), want %s", client, resp.StatusCode, r, err, want)
	}
}

// TestPageShowsTopKeys: a dev-mode admitter with API keys holds a backlog
// of two keys whose jobs are not due for an hour; once the page has an
// admin key (the keys listing shows every tenant's traffic, so it takes
// one), each queue's "Top keys" table shows the keys of
// GET /v1/queues/{queue}/keys, deepest first, with depth, age, weight
// and priority mix, then the release shares once the drain's leader has
// published counts; an empty backlog says so.
func TestPageShowsTopKeys(t *testing.T) {
	const key = "ui-keys-test-admin-key"
	dir := t.TempDir()
	keysFile, adminFile := filepath.Join(dir, "keys"), filepath.Join(dir, "admin-keys")
	if err := os.WriteFile(keysFile, []byte("ui-keys-test-submit-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(adminFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	svc := startAdmitter(t, fmt.Sprintf(keysYAML, t.TempDir(), keysFile, adminFile), nil)
	// flood: admitted, then high, normal, low queued; calm: admitted,
	// then low queued. The first jobs run at once; the queued ones wait.
	for _, s := range []struct {
		client, priority string
		want             spillway.Status
	}{
		{"flood", "", spillway.Admitted}, {"flood", "high", spillway.Queued}, {"flood", "", spillway.Queued}, {"flood", "low", spillway.Queued},
		{"calm", "", spillway.Admitted}, {"calm", "low", spillway.Queued},
	} {
		svc.submitAs(t, "tenants", s.client, s.priority, key, s.want)
	}
	flood, calm := queue.KeyHash("flood"), queue.KeyHash("calm")

	run(ctx, t, "loading /ui", chromedp.Navigate(svc.base+"/ui"))
	waitPage(ctx, t, "tenants", "the API key form", 20*time.Second, func(s shown) bool { return s.State == "unauthorized" && s.AuthShown })
	run(ctx, t, "entering the key", chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS("#apikey")),
		chromedp.SendKeys(chromedp.CSS("#apikey"), key),
		chromedp.Click(chromedp.CSS("#auth-form button")),
	))

	waitKeys := func(what string, cond func(shownKeys) bool) shownKeys {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			k := lookKeys(ctx, t, "tenants")
			if cond(k) {
				return k
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page did not show %s within 15s; it shows %+v", what, k)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	k := waitKeys("two keys", func(k shownKeys) bool { return k.State == "live" && len(k.Rows) == 2 })
	t.Logf("top keys of tenants: %q, rows %+v", k.Title, k.Rows)
	if !k.Table || k.None != "" || !strings.Contains(k.Title, "Top keys by backlog depth · 2 of 2 keys") || strings.Contains(k.Title, "release share") {
		t.Errorf("the section shows title %q, table %v, note %q; want the table of 2 of 2 keys, no release window", k.Title, k.Table, k.None)
	}
	for i, w := range []struct {
		hash               string
		depth, weight, mix string
		maxAge             time.Duration
	}{{flood, "3", "3", "1/1/1", time.Minute}, {calm, "1", "1", "0/0/1", time.Minute}} {
		r := k.Rows[i]
		c := r.Cells
		if r.Hash != w.hash || c["key"].Text != w.hash || c["depth"].Value != w.depth || c["depth"].Text != w.depth ||
			c["weight"].Value != w.weight || c["priority"].Value != w.mix || c["priority"].Text != strings.ReplaceAll(w.mix, "/", " / ") ||
			c["share"].Text != "" || c["share"].Value != "" {
			t.Errorf("row %d: %+v; want key %s, depth %s, weight %s, priorities %s, no release share", i+1, r, w.hash, w.depth, w.weight, w.mix)
		}
		if ms, err := strconv.ParseInt(c["oldest-age"].Value, 10, 64); err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > w.maxAge {
			t.Errorf("row %d: oldest age %q (%q), want the few seconds since the submits", i+1, c["oldest-age"].Value, c["oldest-age"].Text)
		}
	}
	// The page shows what the endpoint says.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, svc.base+"/v1/queues/tenants/keys", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := svc.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list spillway.KeyList
	err = json.NewDecoder(resp.Body).Decode(&list)
	_ = resp.Body.Close()
	if err != nil || len(list.Keys) != 2 || list.Keys[0].KeyHash != flood || list.Keys[0].Depth != 3 || list.Keys[1].KeyHash != calm || list.Keys[1].Depth != 1 {
		t.Fatalf("GET /v1/queues/tenants/keys: %v %+v", err, list)
	}
	if q := lookKeys(ctx, t, "quiet"); q.Table || q.None != "No jobs in the backlog." || len(q.Rows) != 0 {
		t.Errorf("the empty backlog of quiet shows %+v, want no table and \"No jobs in the backlog.\"", q)
	}

	// The drain's leader publishes the releases per key: shares appear.
	nc, err := nats.Connect(svc.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := pace.OpenPacerBucket(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`{"at": %q, "window_s": 60, "releases": {%q: 1, %q: 3}}`, time.Now().UTC().Format(time.RFC3339), flood, calm)
	if _, err := kv.Put(t.Context(), worker.KeyReleasesKey("tenants"), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	k = waitKeys("the release shares", func(k shownKeys) bool { return len(k.Rows) == 2 && k.Rows[0].Cells["share"].Value != "" })
	if s := k.Rows[0].Cells["share"]; s.Value != "0.25" || s.Text != "25 %" {
		t.Errorf("flood's release share: %+v, want 0.25 shown as 25 %%", s)
	}
	if s := k.Rows[1].Cells["share"]; s.Value != "0.75" || s.Text != "75 %" {
		t.Errorf("calm's release share: %+v, want 0.75 shown as 75 %%", s)
	}
	if !strings.Contains(k.Title, "release share: of the jobs released in the 60 s to ") {
		t.Errorf("the title %q does not say the releases' window", k.Title)
	}
	if len(k.Viol) > 0 {
		t.Errorf("the page broke its Content-Security-Policy: %q", k.Viol)
	}
	saveArtifact(t, "ui-top-keys.png", run(ctx, t, "taking a screenshot", chromedp.FullScreenshot(100)))
}
