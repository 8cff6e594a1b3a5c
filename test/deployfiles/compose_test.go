package deployfiles

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/config"
)

const composeFile = "docker-compose.yml"

// The services docs/deployment.md names, by role.
var (
	composeAdmitters = []string{"admitter-1", "admitter-2"}
	composeWorkers   = []string{"worker-1", "worker-2"}
	composeServices  = []string{"nats", "redis", "admitter-1", "admitter-2", "worker-1", "worker-2",
		"nats-exporter", "prometheus", "grafana"}
)

type compose struct {
	Services map[string]*service `yaml:"services"`
	Volumes  map[string]any      `yaml:"volumes"`
}

type service struct {
	Image       string         `yaml:"image"`
	Build       any            `yaml:"build"`
	Command     words          `yaml:"command"`
	Ports       words          `yaml:"ports"`
	Expose      words          `yaml:"expose"`
	Volumes     words          `yaml:"volumes"`
	Environment env            `yaml:"environment"`
	Healthcheck *healthcheck   `yaml:"healthcheck"`
	DependsOn   dependsOn      `yaml:"depends_on"`
	Extra       map[string]any `yaml:",inline"`
}

type healthcheck struct {
	Test    words `yaml:"test"`
	Disable bool  `yaml:"disable"`
}

// words is a compose string-or-list: "a b" or [a, b].
type words []string

func (w *words) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*w = strings.Fields(n.Value)
		return nil
	case yaml.SequenceNode:
		var items []any
		if err := n.Decode(&items); err != nil {
			return err
		}
		*w = make(words, 0, len(items))
		for _, it := range items {
			if _, ok := it.(map[string]any); ok {
				return fmt.Errorf("line %d: long syntax is not checked by this test; use the short syntax", n.Line)
			}
			*w = append(*w, fmt.Sprint(it))
		}
		return nil
	}
	return fmt.Errorf("line %d: want a string or a list", n.Line)
}

// env is a compose environment: a map, or a list of K=V.
type env map[string]string

func (e *env) UnmarshalYAML(n *yaml.Node) error {
	*e = env{}
	switch n.Kind {
	case yaml.MappingNode:
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			(*e)[k] = interpolate(fmt.Sprint(v))
		}
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			(*e)[k] = interpolate(v)
		}
		return nil
	}
	return fmt.Errorf("line %d: environment: want a map or a list", n.Line)
}

// composeVar is a compose variable reference: ${NAME}, ${NAME:-default}
// or ${NAME-default}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate is what compose makes of v with none of its variables set:
// each reference its default (or nothing), "$$" a "$".
func interpolate(v string) string {
	v = composeVar.ReplaceAllString(v, "$2")
	return strings.ReplaceAll(v, "$$", "$")
}

// dependsOn is a compose depends_on: a list of names, or a map of name to
// {condition}.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, s := range l {
			(*d)[s] = "service_started"
		}
		return nil
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			c := v.Condition
			if c == "" {
				c = "service_started"
			}
			(*d)[k] = c
		}
		return nil
	}
	return fmt.Errorf("line %d: depends_on: want a list or a map", n.Line)
}

func loadCompose(t *testing.T) *compose {
	t.Helper()
	var c compose
	decodeYAML(t, composeFile, &c)
	if len(c.Services) == 0 {
		t.Fatalf("%s: no services", composeFile)
	}
	for name, s := range c.Services {
		if s == nil {
			t.Fatalf("%s: services.%s is empty", composeFile, name)
		}
	}
	return &c
}

// mount is one short-syntax volume: host (a path or a named volume),
// container path.
type mount struct{ host, target string }

func (m mount) bind() bool {
	return strings.HasPrefix(m.host, ".") || strings.HasPrefix(m.host, "/") || strings.HasPrefix(m.host, "~")
}

func (s *service) mounts() []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			out = append(out, mount{target: parts[0]})
			continue
		}
		out = append(out, mount{host: parts[0], target: parts[1]})
	}
	return out
}

// hostFileOf returns the repository file mounted at the container path p
// (directly, or inside a mounted directory), or "".
func (s *service) hostFileOf(p string) string {
	for _, m := range s.mounts() {
		if !m.bind() {
			continue
		}
		if m.target == p {
			return path.Clean(m.host)
		}
		if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(m.target, "/")+"/"); ok {
			return path.Join(m.host, rest)
		}
	}
	return ""
}

// containerPorts are the ports a service's container listens on, from
// ports ("host:container") and expose.
func (s *service) containerPorts(t *testing.T, name string) []int {
	t.Helper()
	var out []int
	add := func(field, p string) {
		p = strings.TrimSuffix(strings.TrimSuffix(p, "/tcp"), "/udp")
		if i := strings.LastIndex(p, ":"); i >= 0 {
			p = p[i+1:]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Errorf("%s: services.%s.%s: %q is not a port", composeFile, name, field, p)
			return
		}
		out = append(out, n)
	}
	for _, p := range s.Ports {
		add("ports", p)
	}
	for _, p := range s.Expose {
		add("expose", p)
	}
	return out
}

// healthURL is the URL a health check requests, if it requests one.
func (s *service) healthURL() *url.URL {
	if s.Healthcheck == nil {
		return nil
	}
	for _, w := range s.Healthcheck.Test {
		if strings.HasPrefix(w, "http://") || strings.HasPrefix(w, "https://") {
			if u, err := url.Parse(w); err == nil {
				return u
			}
		}
	}
	return nil
}

func urlPort(u *url.URL) int {
	n, _ := strconv.Atoi(u.Port())
	return n
}

func TestComposeServicesAndImages(t *testing.T) {
	c := loadCompose(t)
	for _, name := range composeServices {
		if c.Services[name] == nil {
			t.Errorf("%s: services.%s is missing (docs/deployment.md lists it)", composeFile, name)
		}
	}
	for name, s := range c.Services {
		if s.Build != nil {
			continue // built here
		}
		img := s.Image
		if img == "" {
			t.Errorf("%s: services.%s: neither image nor build", composeFile, name)
			continue
		}
		if strings.Contains(img, "@sha256:") {
			continue
		}
		tag := ""
		if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
			tag = img[i+1:]
		}
		if tag == "" || tag == "latest" || !strings.ContainsAny(tag, "0123456789") {
			t.Errorf("%s: services.%s.image %q: want a pinned version tag, not %q", composeFile, name, img, tag)
		}
	}
}

func TestComposeMountsExist(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		for _, m := range s.mounts() {
			switch {
			case m.host == "":
				// anonymous volume
			case m.bind():
				if _, err := os.Stat(repoFile(t, path.Clean(m.host))); err != nil {
					t.Errorf("%s: services.%s.volumes: host path %s (mounted at %s) does not exist in the repository", composeFile, name, m.host, m.target)
				}
			default:
				if _, ok := c.Volumes[m.host]; !ok {
					t.Errorf("%s: services.%s.volumes: named volume %q is not declared under volumes:", composeFile, name, m.host)
				}
			}
		}
	}
}

func TestComposeDependsOnHealthy(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		for dep, cond := range s.DependsOn {
			d := c.Services[dep]
			if d == nil {
				t.Errorf("%s: services.%s.depends_on: no service %q", composeFile, name, dep)
				continue
			}
			if cond == "service_healthy" && (d.Healthcheck == nil || d.Healthcheck.Disable || len(d.Healthcheck.Test) == 0) {
				t.Errorf("%s: services.%s.depends_on.%s: condition service_healthy, but %s has no healthcheck", composeFile, name, dep, dep)
			}
		}
	}
	// Spillway's processes wait for healthy NATS and Redis.
	for _, name := range append(append([]string{}, composeAdmitters...), composeWorkers...) {
		s := c.Services[name]
		if s == nil {
			continue
		}
		for _, dep := range []string{"nats", "redis"} {
			if s.DependsOn[dep] != "service_healthy" {
				t.Errorf("%s: services.%s.depends_on.%s: want condition service_healthy, got %q", composeFile, name, dep, s.DependsOn[dep])
			}
		}
	}
}

// spillwayConfig loads the configuration a Spillway service runs with: the
// repository file mounted at its --config path, with its SPILLWAY_*
// environment.
func spillwayConfig(t *testing.T, c *compose, name string) *config.Config {
	t.Helper()
	s := c.Services[name]
	if s == nil {
		t.Fatalf("%s: services.%s is missing", composeFile, name)
	}
	cfgPath, ok := flagValue(s.Command, "config")
	if !ok {
		t.Fatalf("%s: services.%s.command %q: no --config", composeFile, name, s.Command)
	}
	host := s.hostFileOf(cfgPath)
	if host == "" {
		t.Fatalf("%s: services.%s: --config %s is not a file mounted from the repository", composeFile, name, cfgPath)
	}
	known := map[string]bool{}
	for _, v := range config.EnvVars() {
		known[v.Name] = true
	}
	for k := range s.Environment {
		if strings.HasPrefix(k, "SPILLWAY_") && !known[k] {
			t.Errorf("%s: services.%s.environment.%s: internal/config reads no such variable", composeFile, name, k)
		}
	}
	return loadConfig(t, fmt.Sprintf("%s: services.%s: %s with its environment", composeFile, name, host), repoFile(t, host), s.Environment)
}

func TestComposeAdmitters(t *testing.T) {
	c := loadCompose(t)
	for _, name := range composeAdmitters {
		s := c.Services[name]
		if s == nil {
			t.Errorf("%s: services.%s is missing", composeFile, name)
			continue
		}
		if len(s.Command) == 0 || s.Command[0] != "admitter" {
			t.Errorf("%s: services.%s.command %q: want admitter --config FILE", composeFile, name, s.Command)
		}
		cfg := spillwayConfig(t, c, name)
		port := listenPort(t, name+": http.listen", cfg.HTTP.Listen)
		ports := s.containerPorts(t, name)
		if len(ports) == 0 {
			t.Errorf("%s: services.%s: no ports or expose; want %d (http.listen %s)", composeFile, name, port, cfg.HTTP.Listen)
		}
		for _, p := range ports {
			if p != port {
				t.Errorf("%s: services.%s: container port %d, but the admitter listens on %d (http.listen %s)", composeFile, name, p, port, cfg.HTTP.Listen)
			}
		}
		checkHealthcheck(t, name, s, port, admitterProbePaths)
	}
}

func TestComposeWorkers(t *testing.T) {
	c := loadCompose(t)
	for _, name := range composeWorkers {
		s := c.Services[name]
		if s == nil {
			t.Errorf("%s: services.%s is missing", composeFile, name)
			continue
		}
		if len(s.Command) == 0 || s.Command[0] != "worker" {
			t.Errorf("%s: services.%s.command %q: want worker --config FILE", composeFile, name, s.Command)
		}
		spillwayConfig(t, c, name)
		addr, ok := flagValue(s.Command, "metrics-listen")
		if !ok {
			addr = ":9090" // cmd/worker's default
		}
		port := listenPort(t, name+": --metrics-listen", addr)
		for _, p := range s.containerPorts(t, name) {
			if p != port {
				t.Errorf("%s: services.%s: container port %d, but --metrics-listen is %s", composeFile, name, p, addr)
			}
		}
		checkHealthcheck(t, name, s, port, workerProbePaths)
	}
}

// checkHealthcheck: a Spillway service's health check runs the image's
// spillctl probe on a path the process serves, on its port.
func checkHealthcheck(t *testing.T, name string, s *service, port int, served []string) {
	t.Helper()
	u := s.healthURL()
	if u == nil {
		t.Errorf("%s: services.%s.healthcheck: want [CMD, /usr/local/bin/spillctl, probe, http://127.0.0.1:%d/readyz], got %v", composeFile, name, port, s.Healthcheck)
		return
	}
	test := s.Healthcheck.Test
	if len(test) < 3 || test[0] != "CMD" || test[1] != "/usr/local/bin/spillctl" || test[2] != "probe" {
		t.Errorf("%s: services.%s.healthcheck.test %q: want CMD /usr/local/bin/spillctl probe URL (the image has no shell)", composeFile, name, test)
	}
	if urlPort(u) != port {
		t.Errorf("%s: services.%s.healthcheck: URL %s: port %s, but the process listens on %d", composeFile, name, u, u.Port(), port)
	}
	if !contains(served, u.Path) {
		t.Errorf("%s: services.%s.healthcheck: URL %s: path %s is not one the process serves (%v)", composeFile, name, u, u.Path, served)
	}
}

func TestComposeNATS(t *testing.T) {
	c := loadCompose(t)
	s := c.Services["nats"]
	if s == nil {
		t.Fatalf("%s: services.nats is missing", composeFile)
	}
	// nats-server's own parser reads the file the command names, with
	// the service's environment.
	conf, ok := flagValue(s.Command, "c")
	if !ok {
		conf, _ = flagValue(s.Command, "config")
	}
	host := s.hostFileOf(conf)
	if host == "" {
		t.Fatalf("%s: services.nats.command %q: want -c FILE, a file mounted from the repository", composeFile, s.Command)
	}
	opts := processNATSConf(t, host, s.Environment)
	if !opts.JetStream {
		t.Errorf("%s: services.nats.command %q: JetStream is not enabled (--jetstream)", composeFile, s.Command)
	}
	if opts.StoreDir == "" {
		t.Errorf("%s: services.nats.command %q: no --store_dir: JetStream would write inside the container", composeFile, s.Command)
	} else {
		onVolume := false
		for _, m := range s.mounts() {
			if m.host != "" && !m.bind() && (opts.StoreDir == m.target || strings.HasPrefix(opts.StoreDir, m.target+"/")) {
				onVolume = true
			}
		}
		if !onVolume {
			t.Errorf("%s: services.nats: JetStream store %s is not on a named volume (volumes: %q)", composeFile, opts.StoreDir, s.Volumes)
		}
	}
	if opts.HTTPPort != 8222 {
		t.Errorf("%s: services.nats.command %q: monitoring port %d, want 8222 (--http_port)", composeFile, s.Command, opts.HTTPPort)
	}
	u := s.healthURL()
	if u == nil {
		t.Fatalf("%s: services.nats.healthcheck: want a request of http://127.0.0.1:8222/healthz?js-enabled-only=true", composeFile)
	}
	if u.Path != "/healthz" || u.Query().Get("js-enabled-only") != "true" || urlPort(u) != opts.HTTPPort {
		t.Errorf("%s: services.nats.healthcheck: URL %s: want /healthz?js-enabled-only=true on the monitoring port %d", composeFile, u, opts.HTTPPort)
	}
	if len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" || s.Healthcheck.Test[1] != "wget" {
		t.Errorf("%s: services.nats.healthcheck.test %q: want CMD wget ... (the -alpine image has busybox wget)", composeFile, s.Healthcheck.Test)
	}
	if !strings.Contains(s.Image, "alpine") {
		t.Errorf("%s: services.nats.image %q: the health check needs wget: use an -alpine variant", composeFile, s.Image)
	}
	// Spillway connects where the NATS service listens.
	clientPort := opts.Port
	if clientPort == 0 {
		clientPort = server.DEFAULT_PORT
	}
	cfg := spillwayConfig(t, c, composeAdmitters[0])
	nu, err := url.Parse(strings.Split(cfg.NATS.URL, ",")[0])
	if err != nil || nu.Hostname() != "nats" || nu.Port() != strconv.Itoa(clientPort) {
		t.Errorf("%s: nats.url %q: want nats://nats:%d, the compose service", composeFile, cfg.NATS.URL, clientPort)
	}
}

func TestComposeNATSExporter(t *testing.T) {
	c := loadCompose(t)
	s := c.Services["nats-exporter"]
	if s == nil {
		t.Fatalf("%s: services.nats-exporter is missing", composeFile)
	}
	if !strings.HasPrefix(s.Image, "natsio/prometheus-nats-exporter:") {
		t.Errorf("%s: services.nats-exporter.image %q: want natsio/prometheus-nats-exporter:<version>", composeFile, s.Image)
	}
	jsz, ok := flagValue(s.Command, "jsz")
	if !ok || jsz != "all" {
		t.Errorf("%s: services.nats-exporter.command %q: want -jsz=all (streams and consumers of every account)", composeFile, s.Command)
	}
	port, ok := flagValue(s.Command, "port")
	if !ok {
		port = "7777"
	}
	if !contains(stringsOfInts(s.containerPorts(t, "nats-exporter")), port) {
		t.Errorf("%s: services.nats-exporter: -port %s is not in its ports or expose", composeFile, port)
	}
	last := s.Command[len(s.Command)-1]
	u, err := url.Parse(last)
	if err != nil || u.Hostname() != "nats" || u.Port() != "8222" {
		t.Errorf("%s: services.nats-exporter.command: last argument %q: want the NATS monitoring URL http://nats:8222", composeFile, last)
	}
}

func stringsOfInts(l []int) []string {
	out := make([]string, len(l))
	for i, n := range l {
		out[i] = strconv.Itoa(n)
	}
	return out
}

type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestComposePrometheus(t *testing.T) {
	c := loadCompose(t)
	s := c.Services["prometheus"]
	if s == nil {
		t.Fatalf("%s: services.prometheus is missing", composeFile)
	}
	cfgPath, ok := flagValue(s.Command, "config.file")
	if !ok {
		cfgPath = "/etc/prometheus/prometheus.yml" // the image's default
	}
	host := s.hostFileOf(cfgPath)
	if host == "" {
		t.Fatalf("%s: services.prometheus: --config.file %s is not mounted from the repository", composeFile, cfgPath)
	}
	var pc prometheusConfig
	decodeYAML(t, host, &pc)

	if len(pc.RuleFiles) == 0 {
		t.Errorf("%s: no rule_files; want /etc/prometheus/alerts.yml", host)
	}
	for _, rf := range pc.RuleFiles {
		if !path.IsAbs(rf) {
			rf = path.Join(path.Dir(cfgPath), rf)
		}
		rfHost := s.hostFileOf(rf)
		if rfHost == "" {
			t.Errorf("%s: rule_files %s: not mounted into the prometheus service (%s)", host, rf, composeFile)
			continue
		}
		matches, err := filepath.Glob(repoFile(t, rfHost))
		if err != nil || len(matches) == 0 {
			t.Errorf("%s: rule_files %s: mounted from %s, which does not exist", host, rf, rfHost)
		}
	}

	// Every target is a compose service on a port it listens on, and every
	// admitter, worker and the exporter is scraped.
	scraped := map[string]bool{}
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				h, p, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("%s: job %s: target %q: want host:port", host, sc.JobName, target)
					continue
				}
				if h == "localhost" || h == "127.0.0.1" {
					h = "prometheus" // Prometheus scraping itself
				}
				scraped[h] = true
				ts := c.Services[h]
				if ts == nil {
					t.Errorf("%s: job %s: target %s: no compose service %q in %s", host, sc.JobName, target, h, composeFile)
					continue
				}
				n, _ := strconv.Atoi(p)
				if !contains(ts.containerPorts(t, h), n) {
					t.Errorf("%s: job %s: target %s: service %s listens on %v, not %s", host, sc.JobName, target, h, ts.containerPorts(t, h), p)
				}
			}
		}
	}
	for _, want := range append(append(append([]string{}, composeAdmitters...), composeWorkers...), "nats-exporter") {
		if !scraped[want] {
			t.Errorf("%s: no scrape target for the compose service %s", host, want)
		}
	}
}

func TestComposeGrafana(t *testing.T) {
	c := loadCompose(t)
	s := c.Services["grafana"]
	if s == nil {
		t.Fatalf("%s: services.grafana is missing", composeFile)
	}
	const provisioning = "/etc/grafana/provisioning"
	provHost := s.hostFileOf(provisioning)
	if provHost == "" {
		t.Fatalf("%s: services.grafana: %s is not mounted from the repository", composeFile, provisioning)
	}
	if s.Environment["GF_AUTH_ANONYMOUS_ENABLED"] != "true" || s.Environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] != "Viewer" {
		t.Errorf("%s: services.grafana.environment: want GF_AUTH_ANONYMOUS_ENABLED=true and GF_AUTH_ANONYMOUS_ORG_ROLE=Viewer, got %v", composeFile, s.Environment)
	}

	// Dashboards: each provider's path is mounted and holds dashboards.
	dashFiles := yamlFilesIn(t, path.Join(provHost, "dashboards"))
	providers := 0
	for _, f := range dashFiles {
		var doc struct {
			Providers []struct {
				Name    string `yaml:"name"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		decodeYAML(t, f, &doc)
		for _, p := range doc.Providers {
			providers++
			h := s.hostFileOf(p.Options.Path)
			if h == "" {
				t.Errorf("%s: provider %q: options.path %s is not mounted into the grafana service (%s)", f, p.Name, p.Options.Path, composeFile)
				continue
			}
			jsons, _ := filepath.Glob(filepath.Join(repoFile(t, h), "*.json"))
			if len(jsons) == 0 {
				t.Errorf("%s: provider %q: %s (mounted from %s) holds no dashboard .json", f, p.Name, p.Options.Path, h)
			}
		}
	}
	if providers == 0 {
		t.Errorf("%s/dashboards: no dashboard provider", provHost)
	}

	// Datasources: the URL is a compose service on a port it listens on.
	sources := 0
	for _, f := range yamlFilesIn(t, path.Join(provHost, "datasources")) {
		var doc struct {
			Datasources []struct {
				Name string `yaml:"name"`
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		decodeYAML(t, f, &doc)
		for _, d := range doc.Datasources {
			if d.Type != "prometheus" {
				continue
			}
			sources++
			u, err := url.Parse(d.URL)
			if err != nil || u.Hostname() == "" {
				t.Errorf("%s: datasource %q: url %q is not a URL", f, d.Name, d.URL)
				continue
			}
			ts := c.Services[u.Hostname()]
			if ts == nil {
				t.Errorf("%s: datasource %q: url %s: no compose service %q", f, d.Name, d.URL, u.Hostname())
				continue
			}
			if !contains(ts.containerPorts(t, u.Hostname()), urlPort(u)) {
				t.Errorf("%s: datasource %q: url %s: service %s listens on %v", f, d.Name, d.URL, u.Hostname(), ts.containerPorts(t, u.Hostname()))
			}
		}
	}
	if sources == 0 {
		t.Errorf("%s/datasources: no prometheus datasource", provHost)
	}
}

// yamlFilesIn lists the .yml/.yaml files of a repository directory, failing
// when there is none.
func yamlFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(repoFile(t, dir))
	if err != nil {
		t.Fatalf("%s: %v (the compose file mounts it)", dir, err)
	}
	var out []string
	for _, e := range entries {
		if ext := path.Ext(e.Name()); !e.IsDir() && (ext == ".yml" || ext == ".yaml") {
			out = append(out, path.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("%s: no .yml or .yaml file", dir)
	}
	return out
}
