package deployfiles

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/handler"
)

const k8sDir = "deploy/k8s"

// manifest is one Kubernetes object and the file it came from.
type manifest struct {
	file string
	doc  map[string]any
}

func (m manifest) kind() string { return getString(m.doc, "kind") }
func (m manifest) name() string { return getString(m.doc, "metadata", "name") }
func (m manifest) where() string {
	return fmt.Sprintf("%s: %s %s", m.file, m.kind(), m.name())
}

// k8sBase reads the kustomization and every manifest of deploy/k8s.
func k8sBase(t *testing.T) (kustomization map[string]any, manifests []manifest) {
	t.Helper()
	return kustomizeDir(t, k8sDir)
}

// kustomizeDir reads the kustomization and every manifest of a directory
// (not its subdirectories).
func kustomizeDir(t *testing.T, dir string) (kustomization map[string]any, manifests []manifest) {
	t.Helper()
	entries, err := os.ReadDir(repoFile(t, dir))
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	for _, e := range entries {
		ext := path.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		rel := path.Join(dir, e.Name())
		docs, err := decodeDocs(rel, readRepoFile(t, rel))
		if err != nil {
			t.Fatalf("not valid YAML: %v", err)
		}
		if e.Name() == "kustomization.yaml" {
			if len(docs) != 1 {
				t.Fatalf("%s: want one document, got %d", rel, len(docs))
			}
			kustomization = docs[0]
			continue
		}
		for i, d := range docs {
			m := manifest{file: rel, doc: d}
			if getString(d, "apiVersion") == "" || m.kind() == "" || m.name() == "" {
				t.Errorf("%s: document %d: want apiVersion, kind and metadata.name, got %q, %q, %q",
					rel, i+1, getString(d, "apiVersion"), m.kind(), m.name())
				continue
			}
			manifests = append(manifests, m)
		}
	}
	if kustomization == nil {
		t.Fatalf("%s/kustomization.yaml is missing", dir)
	}
	return kustomization, manifests
}

func find(t *testing.T, ms []manifest, kind, name string) manifest {
	t.Helper()
	for _, m := range ms {
		if m.kind() == kind && m.name() == name {
			return m
		}
	}
	t.Fatalf("%s: no %s named %s", k8sDir, kind, name)
	return manifest{}
}

func TestKustomization(t *testing.T) {
	for _, dir := range []string{k8sDir, natsClusterDir} {
		t.Run(path.Base(dir), func(t *testing.T) { checkKustomization(t, dir) })
	}
	_, manifests := k8sBase(t)
	kinds := map[string]int{}
	for _, m := range manifests {
		kinds[m.kind()]++
	}
	for _, want := range []string{"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "ScaledObject"} {
		if kinds[want] == 0 {
			t.Errorf("%s: no %s", k8sDir, want)
		}
	}
}

// checkKustomization: the kustomization lists exactly the manifests of its
// directory, its generators' files exist, and it sets the standard labels.
func checkKustomization(t *testing.T, dir string) {
	k, manifests := kustomizeDir(t, dir)
	where := dir + "/kustomization.yaml"
	if getString(k, "kind") != "Kustomization" || !strings.HasPrefix(getString(k, "apiVersion"), "kustomize.config.k8s.io/") {
		t.Errorf("%s: want apiVersion kustomize.config.k8s.io/v1beta1, kind Kustomization", where)
	}
	listed := map[string]bool{}
	for _, r := range stringsOf(getList(k, "resources")) {
		listed[r] = true
		if _, err := os.Stat(repoFile(t, path.Join(dir, r))); err != nil {
			t.Errorf("%s: resources: %s does not exist", where, r)
		}
	}
	files := map[string]bool{}
	for _, m := range manifests {
		files[path.Base(m.file)] = true
	}
	for f := range files {
		if !listed[f] {
			t.Errorf("%s: resources: %s is in %s but not listed", where, f, dir)
		}
	}
	for _, g := range getList(k, "configMapGenerator") {
		for _, f := range stringsOf(getList(g, "files")) {
			if _, file, ok := strings.Cut(f, "="); ok {
				f = file
			}
			if _, err := os.Stat(repoFile(t, path.Join(dir, f))); err != nil {
				t.Errorf("%s: configMapGenerator %s: file %s does not exist", where, getString(g, "name"), f)
			}
		}
	}
	labels := map[string]string{}
	for _, l := range getList(k, "labels") {
		for key, v := range getMap(l, "pairs") {
			labels[key] = fmt.Sprint(v)
		}
	}
	for _, want := range []string{"app.kubernetes.io/name", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by"} {
		if labels[want] == "" {
			t.Errorf("%s: labels: the standard label %s is missing", where, want)
		}
	}
}

// clusterConfig loads the spillway.yaml of the ConfigMap with
// internal/config.
func clusterConfig(t *testing.T, ms []manifest) (*config.Config, manifest) {
	t.Helper()
	cm := find(t, ms, "ConfigMap", "spillway-config")
	text := getString(cm.doc, "data", "spillway.yaml")
	if text == "" {
		t.Fatalf("%s: data.spillway.yaml is missing", cm.where())
	}
	p := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadConfig(t, cm.where()+": data.spillway.yaml", p, nil), cm
}

func TestConfigMap(t *testing.T) {
	_, ms := k8sBase(t)
	cfg, cm := clusterConfig(t, ms)
	if cfg.NATS.Replicas != 3 {
		t.Errorf("%s: data.spillway.yaml: nats.replicas %d, want 3 (R3 streams on the 3-node cluster)", cm.where(), cfg.NATS.Replicas)
	}
	for _, q := range cfg.Queues {
		if q.Backlog.Replicas != 3 {
			t.Errorf("%s: queue %s: backlog replicas %d, want 3", cm.where(), q.Name, q.Backlog.Replicas)
		}
	}
	if cfg.Redis.URL == "" {
		t.Errorf("%s: data.spillway.yaml: no redis.url; several admitters need one bucket store", cm.where())
	}
}

// podSpec returns a Deployment's pod template and its single container.
func podSpec(t *testing.T, d manifest, container string) (tmpl map[string]any, c map[string]any) {
	t.Helper()
	tmpl = getMap(d.doc, "spec", "template")
	for _, x := range getList(tmpl, "spec", "containers") {
		if getString(x, "name") == container {
			return tmpl, x.(map[string]any)
		}
	}
	t.Fatalf("%s: no container %q", d.where(), container)
	return nil, nil
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]any) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if fmt.Sprint(labels[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// containerPort resolves a probe's port (a number or a port name).
func containerPort(c map[string]any, port any) (int, bool) {
	if n, ok := port.(int); ok {
		return n, true
	}
	for _, p := range getList(c, "ports") {
		if getString(p, "name") == fmt.Sprint(port) {
			return getInt(p, "containerPort")
		}
	}
	return 0, false
}

// checkPod checks what admitter and worker pods share: selector, probes on
// served paths and the right port, resources, non-root read-only root, the
// ConfigMap mounted where --config points.
func checkPod(t *testing.T, d manifest, container string, port int, served []string) map[string]any {
	t.Helper()
	tmpl, c := podSpec(t, d, container)
	if !subset(getMap(d.doc, "spec", "selector", "matchLabels"), getMap(tmpl, "metadata", "labels")) {
		t.Errorf("%s: spec.selector.matchLabels %v do not match the pod labels %v", d.where(),
			getMap(d.doc, "spec", "selector", "matchLabels"), getMap(tmpl, "metadata", "labels"))
	}
	for _, probe := range []struct{ field, path string }{{"livenessProbe", "/livez"}, {"readinessProbe", "/readyz"}} {
		p := getMap(c, probe.field, "httpGet")
		if p == nil {
			t.Errorf("%s: container %s: no %s.httpGet", d.where(), container, probe.field)
			continue
		}
		if got := getString(p, "path"); got != probe.path || !contains(served, got) {
			t.Errorf("%s: container %s: %s.httpGet.path %q, want %s (served: %v)", d.where(), container, probe.field, got, probe.path, served)
		}
		if n, ok := containerPort(c, p["port"]); !ok || n != port {
			t.Errorf("%s: container %s: %s.httpGet.port %v is port %d, but the process listens on %d", d.where(), container, probe.field, p["port"], n, port)
		}
	}
	if sp := getMap(c, "startupProbe", "httpGet"); sp != nil {
		if !contains(served, getString(sp, "path")) {
			t.Errorf("%s: container %s: startupProbe.httpGet.path %q is not served", d.where(), container, getString(sp, "path"))
		}
	}
	for _, p := range getList(c, "ports") {
		if n, _ := getInt(p, "containerPort"); n != port {
			t.Errorf("%s: container %s: containerPort %d, but the process listens on %d", d.where(), container, n, port)
		}
	}
	if getMap(c, "resources", "requests") == nil || getMap(c, "resources", "limits") == nil {
		t.Errorf("%s: container %s: want resources.requests and resources.limits", d.where(), container)
	}
	podNonRoot, _ := get(tmpl, "spec", "securityContext", "runAsNonRoot").(bool)
	cNonRoot, _ := get(c, "securityContext", "runAsNonRoot").(bool)
	if !podNonRoot && !cNonRoot {
		t.Errorf("%s: want securityContext.runAsNonRoot: true", d.where())
	}
	if ro, _ := get(c, "securityContext", "readOnlyRootFilesystem").(bool); !ro {
		t.Errorf("%s: container %s: want securityContext.readOnlyRootFilesystem: true", d.where(), container)
	}
	if ape, ok := get(c, "securityContext", "allowPrivilegeEscalation").(bool); !ok || ape {
		t.Errorf("%s: container %s: want securityContext.allowPrivilegeEscalation: false", d.where(), container)
	}

	// --config is a file of the ConfigMap's volume.
	args := append(stringsOf(getList(c, "command")), stringsOf(getList(c, "args"))...)
	cfgPath, ok := flagValue(args, "config")
	if !ok {
		t.Fatalf("%s: container %s: no --config in command/args %q", d.where(), container, args)
	}
	volumes := map[string]map[string]any{}
	for _, v := range getList(tmpl, "spec", "volumes") {
		volumes[getString(v, "name")] = v.(map[string]any)
	}
	mounted := false
	for _, vm := range getList(c, "volumeMounts") {
		dir, sub := getString(vm, "mountPath"), getString(vm, "subPath")
		v := volumes[getString(vm, "name")]
		if getString(v, "configMap", "name") != "spillway-config" {
			continue
		}
		if (sub == "" && path.Join(dir, "spillway.yaml") == cfgPath) || (sub == "spillway.yaml" && dir == cfgPath) {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("%s: container %s: --config %s is not the ConfigMap spillway-config's spillway.yaml", d.where(), container, cfgPath)
	}
	return c
}

func TestAdmitter(t *testing.T) {
	_, ms := k8sBase(t)
	cfg, _ := clusterConfig(t, ms)
	d := find(t, ms, "Deployment", "spillway-admitter")
	if n, _ := getInt(d.doc, "spec", "replicas"); n != 2 {
		t.Errorf("%s: spec.replicas %d, want 2", d.where(), n)
	}
	port := listenPort(t, "ConfigMap spillway-config: http.listen", cfg.HTTP.Listen)
	c := checkPod(t, d, "admitter", port, admitterProbePaths)
	cmd := stringsOf(getList(c, "command"))
	if len(cmd) == 0 || path.Base(cmd[0]) != "admitter" {
		t.Errorf("%s: command %q: want /usr/local/bin/admitter", d.where(), cmd)
	}
	podLabels := getMap(d.doc, "spec", "template", "metadata", "labels")

	svc := find(t, ms, "Service", "spillway-admitter")
	if !subset(getMap(svc.doc, "spec", "selector"), podLabels) {
		t.Errorf("%s: spec.selector %v does not select the admitter pods %v", svc.where(), getMap(svc.doc, "spec", "selector"), podLabels)
	}
	for _, p := range getList(svc.doc, "spec", "ports") {
		if n, ok := containerPort(c, p.(map[string]any)["targetPort"]); !ok || n != port {
			t.Errorf("%s: port %s: targetPort %v is not the admitter's port %d", svc.where(), getString(p, "name"), get(p, "targetPort"), port)
		}
	}
	pdb := find(t, ms, "PodDisruptionBudget", "spillway-admitter")
	if !subset(getMap(pdb.doc, "spec", "selector", "matchLabels"), podLabels) {
		t.Errorf("%s: spec.selector.matchLabels does not select the admitter pods %v", pdb.where(), podLabels)
	}
	if get(pdb.doc, "spec", "minAvailable") == nil && get(pdb.doc, "spec", "maxUnavailable") == nil {
		t.Errorf("%s: want spec.minAvailable or spec.maxUnavailable", pdb.where())
	}
}

func TestWorker(t *testing.T) {
	_, ms := k8sBase(t)
	cfg, _ := clusterConfig(t, ms)
	d := find(t, ms, "Deployment", "spillway-worker")
	_, c := podSpec(t, d, "worker")
	args := append(stringsOf(getList(c, "command")), stringsOf(getList(c, "args"))...)
	addr, ok := flagValue(args, "metrics-listen")
	if !ok {
		addr = ":9090" // cmd/worker's default
	}
	port := listenPort(t, d.where()+": --metrics-listen", addr)
	checkPod(t, d, "worker", port, workerProbePaths)
	if len(args) == 0 || path.Base(args[0]) != "worker" {
		t.Errorf("%s: command %q: want /usr/local/bin/worker", d.where(), args)
	}
	grace, _ := getInt(d.doc, "spec", "template", "spec", "terminationGracePeriodSeconds")
	if float64(grace) <= cfg.Worker.GracePeriod.Seconds() {
		t.Errorf("%s: terminationGracePeriodSeconds %d must exceed worker.grace_period %s, or Kubernetes kills running jobs",
			d.where(), grace, cfg.Worker.GracePeriod)
	}
	podLabels := getMap(d.doc, "spec", "template", "metadata", "labels")
	for _, m := range ms {
		if m.kind() == "PodDisruptionBudget" && strings.Contains(m.name(), "worker") &&
			!subset(getMap(m.doc, "spec", "selector", "matchLabels"), podLabels) {
			t.Errorf("%s: spec.selector.matchLabels does not select the worker pods %v", m.where(), podLabels)
		}
	}
}

// KEDA's prometheus trigger metadata (keda.sh/docs/scalers/prometheus).
var kedaPrometheusKeys = map[string]bool{
	"serverAddress": true, "query": true, "threshold": true, "activationThreshold": true,
	"namespace": true, "customHeaders": true, "ignoreNullValues": true, "queryParameters": true,
	"unsafeSsl": true, "timeout": true,
}

// depthQuery is the query each trigger runs: the queue's backlog depth as
// the admitters export it (every admitter reports the same figure, read
// from JetStream, so max, not sum). Further matchers may narrow it (a
// namespace label, say); the queue matcher must name the queue exactly.
var depthQuery = regexp.MustCompile(`^max\(spillway_queue_depth\{([^{}]*)\}\)$`)

// depthMatcher is one equality matcher of depthQuery's selector.
var depthMatcher = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"\s*$`)

// TestScaledObject checks that KEDA scales the workers on the depth of the
// backlog of each queue they work. The backlog's one consumer, the drain
// leader's headers-only feed (docs/design.md#the-scheduler), exists only
// while a worker leads, and the grants consumer's
// pending grants stay under two by design, whatever the depth; so each
// trigger asks Prometheus for the admitters' spillway_queue_depth.
func TestScaledObject(t *testing.T) {
	_, ms := k8sBase(t)
	cfg, _ := clusterConfig(t, ms)
	so := find(t, ms, "ScaledObject", "spillway-worker")
	if getString(so.doc, "apiVersion") != "keda.sh/v1alpha1" {
		t.Errorf("%s: apiVersion %q, want keda.sh/v1alpha1", so.where(), getString(so.doc, "apiVersion"))
	}
	target := getString(so.doc, "spec", "scaleTargetRef", "name")
	find(t, ms, "Deployment", target)
	if target != "spillway-worker" {
		t.Errorf("%s: scaleTargetRef.name %q, want the worker Deployment spillway-worker", so.where(), target)
	}
	if n, _ := getInt(so.doc, "spec", "minReplicaCount"); n < 1 {
		t.Errorf("%s: minReplicaCount %d: workers also run admitted jobs; never scale them to zero", so.where(), n)
	}

	// Prometheus finds the admitters by their pod annotations.
	adm := find(t, ms, "Deployment", "spillway-admitter")
	ann := getMap(adm.doc, "spec", "template", "metadata", "annotations")
	if getString(ann, "prometheus.io/scrape") != "true" || getString(ann, "prometheus.io/path") != "/metrics" {
		t.Errorf("%s: pod annotations %v: want prometheus.io/scrape \"true\" and prometheus.io/path /metrics, or no Prometheus has the depth the KEDA triggers query", adm.where(), ann)
	}

	want := map[string]bool{} // the queues workers run
	for _, q := range cfg.Queues {
		if q.Handler != (handler.Config{}) {
			want[q.Name] = true
		}
	}
	seen := map[string]bool{}
	for i, tr := range getList(so.doc, "spec", "triggers") {
		where := fmt.Sprintf("%s: triggers[%d]", so.where(), i)
		if getString(tr, "type") != "prometheus" {
			t.Errorf("%s: type %q, want prometheus (on the admitters' spillway_queue_depth)", where, getString(tr, "type"))
			continue
		}
		md := getMap(tr, "metadata")
		for k := range md {
			if !kedaPrometheusKeys[k] {
				t.Errorf("%s: metadata.%s is not a key of KEDA's prometheus scaler", where, k)
			}
		}
		for _, k := range []string{"serverAddress", "query", "threshold", "activationThreshold"} {
			if getString(md, k) == "" {
				t.Errorf("%s: metadata.%s is missing (KEDA wants a string)", where, k)
			}
		}
		for _, k := range []string{"threshold", "activationThreshold"} {
			if v, err := strconv.ParseFloat(getString(md, k), 64); err != nil || v <= 0 {
				t.Errorf("%s: metadata.%s %q: want a positive number of jobs", where, k, getString(md, k))
			}
		}
		if getString(md, "ignoreNullValues") != "false" {
			t.Errorf("%s: metadata.ignoreNullValues %q: want \"false\", so that a lost admitter target is an error that keeps the replicas rather than a depth of 0", where, getString(md, "ignoreNullValues"))
		}
		if u, err := url.Parse(getString(md, "serverAddress")); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Errorf("%s: metadata.serverAddress %q: want Prometheus' http(s) URL", where, getString(md, "serverAddress"))
		}
		query := getString(md, "query")
		m := depthQuery.FindStringSubmatch(query)
		if m == nil {
			t.Errorf("%s: metadata.query %q: want max(spillway_queue_depth{queue=\"<queue>\"}), the backlog's depth", where, query)
			continue
		}
		q := ""
		for _, part := range strings.Split(m[1], ",") {
			lm := depthMatcher.FindStringSubmatch(part)
			if lm == nil {
				t.Errorf("%s: metadata.query %q: matcher %q: want label=\"value\"", where, query, part)
				continue
			}
			if lm[1] == "queue" {
				q = lm[2]
			}
		}
		if !want[q] {
			t.Errorf("%s: metadata.query %q: queue %q is not a queue with a handler in the ConfigMap (want one of %v)", where, query, q, keys(want))
		}
		seen[q] = true
	}
	for q := range want {
		if !seen[q] {
			t.Errorf("%s: no trigger on the backlog depth of queue %s", so.where(), q)
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
