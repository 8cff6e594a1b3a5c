package monitoring

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// The deploy files, relative to this package.
var (
	prometheusYML   = filepath.Join("..", "..", "deploy", "prometheus", "prometheus.yml")
	alertsYML       = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
	alertsTestYML   = filepath.Join("..", "..", "deploy", "prometheus", "alerts_test.yml")
	dashboardJSON   = filepath.Join("..", "..", "deploy", "grafana", "dashboards", "spillway.json")
	datasourceYML   = filepath.Join("..", "..", "deploy", "grafana", "provisioning", "datasources", "prometheus.yml")
	dashProviderYML = filepath.Join("..", "..", "deploy", "grafana", "provisioning", "dashboards", "spillway.yml")
)

// Where docker-compose mounts the files (deploy/prometheus/prometheus.yml
// and the provisioning files say so too).
const (
	mountedAlerts     = "/etc/prometheus/alerts.yml"
	mountedDashboards = "/var/lib/grafana/dashboards"
)

// tool finds a Prometheus binary: $env, then PATH, then /usr/bin. The
// test fails, never skips, without it.
func tool(t *testing.T, name, env string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if !fileExists(p) {
			t.Fatalf("$%s=%s: no such file; install Debian's prometheus package (apt-get install -y prometheus), which has prometheus and promtool, or point %s at the binary", env, p, env)
		}
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/bin/" + name; fileExists(p) {
		return p
	}
	t.Fatalf("%s not found (looked at $%s, PATH and /usr/bin): install Debian's prometheus package (apt-get install -y prometheus), which has prometheus and promtool, or set %s", name, env, env)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPromtoolCheckConfig checks prometheus.yml as Prometheus will load it
// in compose: its rule file at /etc/prometheus/alerts.yml. promtool
// resolves that absolute path, so the check runs on a copy whose
// rule_files entry points at the same layout under a temporary root.
func TestPromtoolCheckConfig(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", "PROMTOOL")
	var cfg map[string]any
	readYAML(t, prometheusYML, &cfg)
	rules, _ := cfg["rule_files"].([]any)
	if len(rules) != 1 || rules[0] != mountedAlerts {
		t.Fatalf("%s: rule_files = %v, want [%s] (where compose mounts alerts.yml)", prometheusYML, cfg["rule_files"], mountedAlerts)
	}
	root := t.TempDir()
	copyFile(t, alertsYML, filepath.Join(root, mountedAlerts))
	cfg["rule_files"] = []any{filepath.Join(root, mountedAlerts)}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc", "prometheus", "prometheus.yml")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, root, promtool, "check", "config", conf)
	if !strings.Contains(out, "SUCCESS") || !strings.Contains(out, "rules found") {
		t.Errorf("promtool check config did not report the config and its rules as good:\n%s", out)
	}
	t.Logf("promtool check config:\n%s", out)
}

func TestPromtoolCheckRules(t *testing.T) {
	t.Parallel()
	out := run(t, ".", tool(t, "promtool", "PROMTOOL"), "check", "rules", alertsYML)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	t.Logf("promtool check rules:\n%s", out)
}

// TestPromtoolTestRules runs the alerts' unit tests, and checks that
// every alert has a test case, a severity, a summary, a description and a
// runbook.
func TestPromtoolTestRules(t *testing.T) {
	t.Parallel()
	out := run(t, filepath.Dir(alertsTestYML), tool(t, "promtool", "PROMTOOL"), "test", "rules", filepath.Base(alertsTestYML))
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}

	var rules ruleFile
	readYAML(t, alertsYML, &rules)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, alertsTestYML, &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	alerts := rules.alerts()
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerts", alertsYML)
	}
	for _, r := range alerts {
		if !fires[r.Alert] {
			t.Errorf("alert %s: no test case in %s where it fires", r.Alert, alertsTestYML)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("alert %s: no %s annotation", r.Alert, a)
			}
		}
		if want := "#" + strings.ToLower(r.Alert); !strings.HasSuffix(r.Annotations["runbook_url"], want) {
			t.Errorf("alert %s: runbook_url %q, want README.md%s", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func (f ruleFile) alerts() []rule {
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}
