package deployfiles

import (
	"fmt"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

const (
	natsClusterDir  = "deploy/nats/cluster"
	natsClusterConf = natsClusterDir + "/nats.conf"
)

// TestNATSClusterConfig parses the cluster configuration with nats-server's
// own parser, as each of the three pods would (SERVER_NAME is the pod
// name), and checks the durability profile and the routes.
func TestNATSClusterConfig(t *testing.T) {
	_, ms := k8sBase(t)
	_, nms := kustomizeDir(t, natsClusterDir)
	headless := getString(find(t, nms, "StatefulSet", "nats").doc, "spec", "serviceName")

	for i := range 3 {
		pod := fmt.Sprintf("nats-%d", i)
		t.Run(pod, func(t *testing.T) {
			t.Setenv("SERVER_NAME", pod)
			setNATSPasswords(t, nil)
			opts, err := server.ProcessConfigFile(repoFile(t, natsClusterConf))
			if err != nil {
				t.Fatalf("%s: nats-server does not accept it: %v", natsClusterConf, err)
			}
			if opts.ServerName != pod {
				t.Errorf("%s: server_name %q, want the pod name %q (from $SERVER_NAME)", natsClusterConf, opts.ServerName, pod)
			}
			if !opts.JetStream {
				t.Errorf("%s: JetStream is not enabled", natsClusterConf)
			}
			if opts.StoreDir == "" {
				t.Errorf("%s: jetstream.store_dir is not set", natsClusterConf)
			}
			if !opts.SyncAlways {
				t.Errorf("%s: jetstream.sync_interval is not always (interval %s)", natsClusterConf, opts.SyncInterval)
			}
			if opts.HTTPPort != 8222 {
				t.Errorf("%s: monitoring port %d, want 8222 (the exporter and the probes use it)", natsClusterConf, opts.HTTPPort)
			}
			if opts.Port != 4222 {
				t.Errorf("%s: client port %d, want 4222 (nats.url in the ConfigMap)", natsClusterConf, opts.Port)
			}
			if opts.Cluster.Name == "" || opts.Cluster.Port == 0 {
				t.Errorf("%s: cluster: want a name and a listen port, got %q port %d", natsClusterConf, opts.Cluster.Name, opts.Cluster.Port)
			}
			if len(opts.Routes) != 3 {
				t.Fatalf("%s: cluster.routes: %d routes, want 3 (every server lists all three)", natsClusterConf, len(opts.Routes))
			}
			var hosts []string
			for _, r := range opts.Routes {
				hosts = append(hosts, r.Hostname())
				if r.Port() != fmt.Sprint(opts.Cluster.Port) {
					t.Errorf("%s: route %s: port %s, but the cluster listens on %d", natsClusterConf, r, r.Port(), opts.Cluster.Port)
				}
			}
			sort.Strings(hosts)
			for j, h := range hosts {
				want := fmt.Sprintf("nats-%d.%s", j, headless)
				if h != want && !strings.HasPrefix(h, want+".") {
					t.Errorf("%s: route host %q, want %s (pod nats-%d behind the StatefulSet's headless service %s)",
						natsClusterConf, h, want, j, headless)
				}
			}
		})
	}
	// Spillway itself connects to the client service beside the cluster.
	cfg, cm := clusterConfig(t, ms)
	u, err := url.Parse(strings.Split(cfg.NATS.URL, ",")[0])
	if err != nil || u.Port() != "4222" {
		t.Errorf("%s: nats.url %q: want the cluster's client port 4222", cm.where(), cfg.NATS.URL)
	}
}

// TestNATSStatefulSet checks the StatefulSet that runs nats.conf against
// it: three pods named as the routes expect, the config file where --config
// points, JetStream's store on the pods' volume, probes and Services on
// the ports the file sets, lame duck within the termination grace.
func TestNATSStatefulSet(t *testing.T) {
	t.Setenv("SERVER_NAME", "nats-0")
	setNATSPasswords(t, nil)
	opts, err := server.ProcessConfigFile(repoFile(t, natsClusterConf))
	if err != nil {
		t.Fatalf("%s: nats-server does not accept it: %v", natsClusterConf, err)
	}
	k, ms := kustomizeDir(t, natsClusterDir)
	sts := find(t, ms, "StatefulSet", "nats")
	where := sts.where()

	if n, _ := getInt(sts.doc, "spec", "replicas"); n != len(opts.Routes) {
		t.Errorf("%s: spec.replicas %d, but nats.conf routes to %d servers", where, n, len(opts.Routes))
	}
	headless := getString(sts.doc, "spec", "serviceName")
	for _, r := range opts.Routes {
		pod, svc, _ := strings.Cut(r.Hostname(), ".")
		if !strings.HasPrefix(pod, "nats-") || !strings.HasPrefix(svc, headless) {
			t.Errorf("%s: route %s is not a pod of StatefulSet nats behind its serviceName %s", natsClusterConf, r, headless)
		}
	}
	hs := find(t, ms, "Service", headless)
	if get(hs.doc, "spec", "clusterIP") != "None" {
		t.Errorf("%s: want clusterIP: None (a headless service gives each pod a DNS name)", hs.where())
	}
	if v, _ := get(hs.doc, "spec", "publishNotReadyAddresses").(bool); !v {
		t.Errorf("%s: want publishNotReadyAddresses: true: servers must resolve each other before they are ready", hs.where())
	}

	tmpl, c := podSpec(t, sts, "nats")
	podLabels := getMap(tmpl, "metadata", "labels")
	if !subset(getMap(sts.doc, "spec", "selector", "matchLabels"), podLabels) {
		t.Errorf("%s: spec.selector.matchLabels do not match the pod labels %v", where, podLabels)
	}
	for _, m := range ms {
		var sel map[string]any
		switch m.kind() {
		case "Service":
			sel = getMap(m.doc, "spec", "selector")
		case "PodDisruptionBudget":
			sel = getMap(m.doc, "spec", "selector", "matchLabels")
		default:
			continue
		}
		if !subset(sel, podLabels) {
			t.Errorf("%s: selector %v does not select the NATS pods %v", m.where(), sel, podLabels)
		}
	}

	// SERVER_NAME is the pod name.
	named := false
	for _, e := range getList(c, "env") {
		if getString(e, "name") == "SERVER_NAME" && getString(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name" {
			named = true
		}
	}
	if !named {
		t.Errorf("%s: env SERVER_NAME must come from metadata.name (nats.conf's server_name)", where)
	}

	// --config is nats.conf from the generated ConfigMap.
	args := append(stringsOf(getList(c, "command")), stringsOf(getList(c, "args"))...)
	confPath, ok := flagValue(args, "config")
	if !ok {
		confPath, ok = flagValue(args, "c")
	}
	if !ok {
		t.Fatalf("%s: no --config in the container's args %q", where, args)
	}
	generated := map[string]bool{}
	for _, g := range getList(k, "configMapGenerator") {
		for _, f := range stringsOf(getList(g, "files")) {
			if path.Base(f) == path.Base(natsClusterConf) {
				generated[getString(g, "name")] = true
			}
		}
	}
	volumes := map[string]map[string]any{}
	for _, v := range getList(tmpl, "spec", "volumes") {
		volumes[getString(v, "name")] = v.(map[string]any)
	}
	claims := map[string]bool{}
	for _, vc := range getList(sts.doc, "spec", "volumeClaimTemplates") {
		claims[getString(vc, "metadata", "name")] = true
	}
	confMounted, storeOnClaim, pidWritable := false, false, false
	for _, vm := range getList(c, "volumeMounts") {
		name, dir := getString(vm, "name"), getString(vm, "mountPath")
		if generated[getString(volumes[name], "configMap", "name")] && path.Join(dir, path.Base(natsClusterConf)) == confPath {
			confMounted = true
		}
		if claims[name] && (opts.StoreDir == dir || strings.HasPrefix(opts.StoreDir, dir+"/")) {
			storeOnClaim = true
		}
		if ro, _ := get(vm, "readOnly").(bool); opts.PidFile != "" && path.Dir(opts.PidFile) == dir && !ro {
			pidWritable = true
		}
	}
	if !confMounted {
		t.Errorf("%s: --config %s is not nats.conf of the kustomization's configMapGenerator", where, confPath)
	}
	if !storeOnClaim {
		t.Errorf("%s: JetStream's store_dir %s is not on a volumeClaimTemplate: a restarted pod would lose its streams", where, opts.StoreDir)
	}
	if opts.PidFile != "" && !pidWritable {
		t.Errorf("%s: pid_file %s: its directory is not a writable volume (the root file system is read-only)", where, opts.PidFile)
	}
	if cmd := stringsOf(getList(c, "lifecycle", "preStop", "exec", "command")); !strings.Contains(strings.Join(cmd, " "), "ldm="+opts.PidFile) {
		t.Errorf("%s: preStop %q: want nats-server --signal ldm=%s (lame-duck mode before the stop)", where, cmd, opts.PidFile)
	}
	grace, _ := getInt(tmpl, "spec", "terminationGracePeriodSeconds")
	if float64(grace) <= (opts.LameDuckDuration + opts.LameDuckGracePeriod).Seconds() {
		t.Errorf("%s: terminationGracePeriodSeconds %d must exceed lame_duck_duration + lame_duck_grace_period (%s + %s)",
			where, grace, opts.LameDuckDuration, opts.LameDuckGracePeriod)
	}

	// Ports and probes agree with the file.
	ports := map[string]int{}
	for _, p := range getList(c, "ports") {
		n, _ := getInt(p, "containerPort")
		ports[getString(p, "name")] = n
	}
	for name, want := range map[string]int{"client": opts.Port, "cluster": opts.Cluster.Port, "monitor": opts.HTTPPort} {
		if ports[name] != want {
			t.Errorf("%s: containerPort %s is %d, nats.conf says %d", where, name, ports[name], want)
		}
	}
	for _, field := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		p := getMap(c, field, "httpGet")
		if p == nil {
			t.Errorf("%s: no %s.httpGet", where, field)
			continue
		}
		n, _ := containerPort(c, p["port"])
		u, err := url.Parse(getString(p, "path"))
		if err != nil || u.Path != "/healthz" || n != opts.HTTPPort {
			t.Errorf("%s: %s: want /healthz on the monitoring port %d, got %v on %v", where, field, opts.HTTPPort, p["path"], p["port"])
		}
	}
	for _, m := range ms {
		if m.kind() != "Service" {
			continue
		}
		for _, p := range getList(m.doc, "spec", "ports") {
			n, ok := containerPort(c, get(p, "targetPort"))
			if port, _ := getInt(p, "port"); !ok || n != port {
				t.Errorf("%s: port %s: targetPort %v is container port %d, want %d", m.where(), getString(p, "name"), get(p, "targetPort"), n, port)
			}
		}
	}

	// Spillway's ConfigMap connects to the client service.
	_, base := k8sBase(t)
	cfg, cm := clusterConfig(t, base)
	u, err := url.Parse(strings.Split(cfg.NATS.URL, ",")[0])
	if err != nil {
		t.Fatalf("%s: nats.url %q: %v", cm.where(), cfg.NATS.URL, err)
	}
	svc := find(t, ms, "Service", u.Hostname())
	served := false
	for _, p := range getList(svc.doc, "spec", "ports") {
		if n, _ := getInt(p, "port"); strconv.Itoa(n) == u.Port() {
			served = true
		}
	}
	if !served {
		t.Errorf("%s: nats.url %s: the Service %s has no port %s", cm.where(), cfg.NATS.URL, u.Hostname(), u.Port())
	}

	// The image is the one compose runs.
	if img, want := getString(c, "image"), loadCompose(t).Services["nats"].Image; img != want {
		t.Errorf("%s: image %q differs from the compose nats image %q", where, img, want)
	}
}
