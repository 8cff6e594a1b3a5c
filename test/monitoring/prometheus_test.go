package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/testkit/proc"
)

// rateWindow replaces Grafana's $__rate_interval: Prometheus scrapes
// every second here, and a rate needs a few samples in its window.
const rateWindow = "15s"

// queueRegex is what Grafana puts for $queue with "All" selected: the
// variable's values as a regex alternation.
var queueRegex = "(" + testQueue + "|" + brokenQueue + "|" + flowQueue + ")"

// TestRealPrometheus runs Debian's Prometheus with the scrape config of
// deploy/prometheus/prometheus.yml, its targets pointed at the admitters
// and the worker of startSystem under load, its rules the deploy alert
// rules, and checks that every target is up, every rule evaluates
// without error, and every dashboard query returns data. The NATS
// exporter's queries are not checked: its binary is not available here
// (see the package's report).
func TestRealPrometheus(t *testing.T) {
	bin := tool(t, "prometheus", "PROMETHEUS")
	sys := startSystem(t)
	sys.reload(t)

	dir := t.TempDir()
	addr := freeAddr(t)
	conf := prometheusConfig(t, dir, addr, map[string][]string{
		"spillway-admitter": {sys.dev.HTTPAddr(), sys.shared.HTTPAddr()},
		"spillway-worker":   {strings.TrimPrefix(sys.workerURL, "http://")},
		"prometheus":        {addr},
		"nats":              nil, // no exporter: the job is left out
	})
	api := startPrometheus(t, bin, dir, conf, addr)

	// Every query of the dashboard, as Grafana would send it.
	exprs := readDashboard(t).expressions()
	pending := map[string]string{}
	for where, expr := range exprs {
		if strings.HasPrefix(where, "variable ") {
			continue
		}
		if strings.Contains(expr, "jetstream_") {
			t.Logf("not checked (needs prometheus-nats-exporter): %s: %s", where, expr)
			continue
		}
		pending[where] = grafanaExpand(expr)
	}
	checked := len(pending)
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for _, where := range sortedKeys(pending) {
			res, nonZero, err := api.query(t, pending[where])
			if err != nil {
				t.Fatalf("%s: %s: %v", where, pending[where], err)
			}
			if len(res) > 0 && (nonZero || mayBeZero[where]) {
				t.Logf("%s: %d series, e.g. %s", where, len(res), res[0])
				delete(pending, where)
			}
		}
		if len(pending) > 0 {
			time.Sleep(time.Second)
		}
	}
	for _, where := range sortedKeys(pending) {
		t.Errorf("%s: no data, or only zeros, within 60s: %s", where, pending[where])
	}
	t.Logf("%d of %d dashboard queries returned data", checked-len(pending), checked)

	// The variable's own query.
	if vals, err := api.labelValues(t, "queue", "spillway_queue_capacity"); err != nil || !slices.Contains(vals, testQueue) {
		t.Errorf("label_values(spillway_queue_capacity, queue) = %v, %v; want %s among them", vals, err, testQueue)
	}

	// Every target up, every rule evaluated without error.
	targets := api.targets(t)
	for _, tg := range targets {
		if tg.Health != "up" {
			t.Errorf("target %s of job %s: %s (%s)", tg.ScrapeURL, tg.Labels["job"], tg.Health, tg.LastError)
		}
	}
	if len(targets) != 4 {
		t.Errorf("%d active targets, want 4 (2 admitters, 1 worker, Prometheus): %+v", len(targets), targets)
	}

	// The rules run against what the system exports: those whose cause
	// the system has (Redis down, a queue that cannot be read, failing
	// jobs) become pending (their for: is longer than the test) or, for
	// a reload failure counted now that Prometheus has seen the counter,
	// fire; those whose cause it has not stay inactive. The failure
	// mode's for: (1m) may pass while the test waits for the dashboard's
	// queries, so it may be pending or firing ("active").
	sys.dev.ReloadFailed()
	want := map[string]string{
		"SpillwayFailureModeActive":   "active",
		"SpillwayStoreErrors":         "pending",
		"SpillwayQueueInspectFailing": "pending",
		"SpillwayDeadLettersGrowing":  "pending",
		"SpillwayConfigReloadFailed":  "firing",
		"SpillwayAdmitterDown":        "inactive",
		"SpillwayWorkerDown":          "inactive",
		"SpillwayBacklogStalled":      "inactive",
		"SpillwayAckPendingNearMax":   "inactive",
		"SpillwayAdmitterErrors":      "inactive",
		"SpillwayBacklogDrainTooSlow": "inactive",
		// The load's only settle failures are a handler's invalid costs;
		// its busy jobs pause their keys several times a minute.
		"SpillwayCostSettleFailing": "inactive",
		"SpillwayKeyPushbackSteady": "pending",
	}
	var rules []promRule
	for deadline := time.Now().Add(30 * time.Second); ; {
		rules = api.rules(t)
		if rulesAre(rules, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var file ruleFile
	readYAML(t, alertsYML, &file)
	if len(rules) != len(file.alerts()) {
		t.Errorf("Prometheus loaded %d rules, %s has %d alerts", len(rules), alertsYML, len(file.alerts()))
	}
	for _, r := range rules {
		switch {
		case r.Health != "ok":
			t.Errorf("rule %s: health %q, last error %q", r.Name, r.Health, r.LastError)
		case want[r.Name] != "" && !stateIs(r.State, want[r.Name]):
			t.Errorf("rule %s: state %s, want %s", r.Name, r.State, want[r.Name])
		default:
			t.Logf("rule %s: ok, state %s", r.Name, r.State)
		}
	}
}

// mayBeZero are the dashboard queries whose value may rightly be 0 under
// this load (nothing running at the instant, nothing dropped, no reload
// in the window); every other query must show a non-zero value.
var mayBeZero = map[string]bool{
	"panel In flight and ready A":                         true,
	"panel In flight and ready B":                         true,
	"panel Consumers: ack pending and backlog fetchers A": true,
	"panel Consumers: ack pending and backlog fetchers C": true,
	"panel Consumers: ack pending and backlog fetchers D": true,
	"panel Admitter housekeeping A":                       true,
	"panel Admitter housekeeping B":                       true,
	"panel Dead letters C":                                true, // no job has a max wait here
	"panel Admitter housekeeping D":                       true, // no key file here
	"panel Submission bytes held A":                       true, // small jobs, read at once
	"panel Submissions waited, shed and dropped A":        true, // the bound is never reached here
	"panel Submissions waited, shed and dropped B":        true,
	"panel Submissions waited, shed and dropped C":        true, // producers answer on their inboxes
	"panel Per-key concurrency waits B":                   true, // no job may be waiting at the instant
}

// rulesAre reports whether every rule has been evaluated, is healthy and
// is in the state want gives it.
func rulesAre(rules []promRule, want map[string]string) bool {
	if len(rules) == 0 {
		return false
	}
	for _, r := range rules {
		if r.LastEvaluation.Before(time.Unix(1, 0)) || r.Health != "ok" {
			return false
		}
		if w := want[r.Name]; w != "" && !stateIs(r.State, w) {
			return false
		}
	}
	return true
}

// stateIs says whether a rule's state is want, where "active" is
// pending or firing (the rule's expression holds).
func stateIs(state, want string) bool {
	if want == "active" {
		return state == "pending" || state == "firing"
	}
	return state == want
}

// grafanaExpand substitutes the dashboard's variables as Grafana does.
func grafanaExpand(expr string) string {
	return strings.NewReplacer(
		"$__rate_interval", rateWindow,
		"${queue}", queueRegex,
		"$queue", queueRegex,
	).Replace(expr)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// prometheusConfig writes deploy/prometheus/prometheus.yml to dir with a
// 1s scrape and evaluation interval, its rule file a copy of alerts.yml
// in dir, and each job's targets replaced by targets[job] (nil: the job
// is left out). Every job of the file must be in targets.
func prometheusConfig(t *testing.T, dir, self string, targets map[string][]string) string {
	t.Helper()
	var cfg map[string]any
	readYAML(t, prometheusYML, &cfg)
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
	rules := filepath.Join(dir, "alerts.yml")
	copyFile(t, alertsYML, rules)
	cfg["rule_files"] = []any{rules}
	jobs, _ := cfg["scrape_configs"].([]any)
	var kept []any
	seen := map[string]bool{}
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		name, _ := job["job_name"].(string)
		want, ok := targets[name]
		if !ok {
			t.Fatalf("%s: job %q: the test does not know where to point it", prometheusYML, name)
		}
		seen[name] = true
		if want == nil {
			continue
		}
		job["static_configs"] = []any{map[string]any{"targets": want}}
		kept = append(kept, job)
	}
	for name := range targets {
		if !seen[name] {
			t.Errorf("%s: no scrape job %q", prometheusYML, name)
		}
	}
	cfg["scrape_configs"] = kept
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// promAPI is the HTTP API of a running Prometheus.
type promAPI struct {
	base   string
	client *http.Client
}

// startPrometheus runs bin until the test ends and waits until it is ready.
func startPrometheus(t *testing.T, bin, dir, conf, addr string) *promAPI {
	t.Helper()
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), bin,
		"--config.file="+conf,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	proc.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	})
	api := &promAPI{base: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(api.client.CloseIdleConnections)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus exited before it was ready:\n%s", b)
		default:
		}
		if code, _, err := api.get(t, "/-/ready"); err == nil && code == http.StatusOK {
			return api
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus not ready within 30s:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *promAPI) get(t *testing.T, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// call GETs an API path and decodes its data into v.
func (p *promAPI) call(t *testing.T, path string, v any) error {
	code, b, err := p.get(t, path)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %d %s: %s", path, code, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// query runs an instant query and returns its series, each as text, and
// whether any has a value other than 0.
func (p *promAPI) query(t *testing.T, expr string) ([]string, bool, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	}
	if err := p.call(t, "/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, false, err
	}
	var out []string
	nonZero := false
	for _, r := range data.Result {
		if len(r.Value) != 2 {
			return nil, false, fmt.Errorf("%s: a sample %v, want [time, value]", expr, r.Value)
		}
		v, _ := r.Value[1].(string)
		if f, err := strconv.ParseFloat(v, 64); err == nil && f != 0 {
			nonZero = true
		}
		out = append(out, fmt.Sprintf("%v = %s", r.Metric, v))
	}
	return out, nonZero, nil
}

func (p *promAPI) labelValues(t *testing.T, label, metric string) ([]string, error) {
	var vals []string
	err := p.call(t, "/api/v1/label/"+label+"/values?match[]="+url.QueryEscape(metric), &vals)
	return vals, err
}

type promTarget struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

func (p *promAPI) targets(t *testing.T) []promTarget {
	t.Helper()
	var data struct {
		ActiveTargets []promTarget `json:"activeTargets"`
	}
	if err := p.call(t, "/api/v1/targets?state=active", &data); err != nil {
		t.Fatal(err)
	}
	return data.ActiveTargets
}

type promRule struct {
	Name           string    `json:"name"`
	State          string    `json:"state"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

func (p *promAPI) rules(t *testing.T) []promRule {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.call(t, "/api/v1/rules?type=alert", &data); err != nil {
		t.Fatal(err)
	}
	var out []promRule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}
