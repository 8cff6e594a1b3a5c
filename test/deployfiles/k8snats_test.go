package deployfiles

import (
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const natsSecret = "spillway-nats"

// secretKeyOf is the spillway-nats key env entry e reads, or "".
func secretKeyOf(e any) string {
	if getString(e, "valueFrom", "secretKeyRef", "name") != natsSecret {
		return ""
	}
	return getString(e, "valueFrom", "secretKeyRef", "key")
}

// TestK8sNATSCredentials checks the Kubernetes wiring of the NATS roles:
// the Secret holds every role's password, the NATS servers read each
// from it under the variable auth.conf names, each admitter and worker
// logs in as its role with its own key and takes its own inbox prefix,
// and every file nats.conf includes is in the servers' ConfigMap.
func TestK8sNATSCredentials(t *testing.T) {
	_, ms := k8sBase(t)
	secret := find(t, ms, "Secret", natsSecret)
	data := getMap(secret.doc, "stringData")
	for _, role := range natsRoles {
		if getString(data, role+"-password") == "" {
			t.Errorf("%s: no stringData.%s-password", secret.where(), role)
		}
	}

	// The servers.
	k, nms := kustomizeDir(t, natsClusterDir)
	_, c := podSpec(t, find(t, nms, "StatefulSet", "nats"), "nats")
	fromSecret := map[string]string{}
	for _, e := range getList(c, "env") {
		if key := secretKeyOf(e); key != "" {
			fromSecret[getString(e, "name")] = key
		}
	}
	serverEnv := map[string]string{}
	for _, role := range natsRoles {
		v := natsPasswordVar(role)
		if fromSecret[v] != role+"-password" {
			t.Errorf("StatefulSet nats: env %s: want secretKeyRef %s key %s-password, got key %q", v, natsSecret, role, fromSecret[v])
		}
		serverEnv[v] = getString(data, role+"-password")
	}
	opts := processNATSConf(t, natsClusterConf, serverEnv)

	generated := map[string]bool{}
	for _, g := range getList(k, "configMapGenerator") {
		for _, f := range stringsOf(getList(g, "files")) {
			generated[path.Base(f)] = true
		}
	}
	conf, err := os.ReadFile(repoFile(t, natsClusterConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s]+)"?`).FindAllStringSubmatch(string(conf), -1) {
		if !generated[path.Base(m[1])] {
			t.Errorf("%s: include %s: not in the kustomization's configMapGenerator, so not in the pods", natsClusterConf, m[1])
		}
	}

	// Spillway's pods.
	for deployment, role := range map[string]string{"spillway-admitter": "admitter", "spillway-worker": "worker"} {
		d := find(t, ms, "Deployment", deployment)
		_, c := podSpec(t, d, role)
		env := map[string]string{}
		for _, e := range getList(c, "env") {
			name, value := getString(e, "name"), getString(e, "value")
			if key := secretKeyOf(e); key != "" {
				if key != role+"-password" {
					t.Errorf("%s: env %s reads %s key %s, want %s-password (each role its own)", d.where(), name, natsSecret, key, role)
				}
				value = getString(data, key)
			}
			// Kubernetes expands $(NAME) of the variables defined before.
			value = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(value, func(ref string) string {
				return env[ref[2:len(ref)-1]]
			})
			env[name] = value
		}
		u, err := url.Parse(env["SPILLWAY_NATS_URL"])
		if err != nil || u.User == nil {
			t.Errorf("%s: env SPILLWAY_NATS_URL: want nats://%s:$(PASSWORD)@nats:4222 with the password from %s", d.where(), role, natsSecret)
			continue
		}
		password, _ := u.User.Password()
		if user := natsUser(opts, u.User.Username()); u.User.Username() != role || user == nil || user.Password != password {
			t.Errorf("%s: logs in to NATS as %q with a password that is not the %s user's of %s", d.where(), u.User.Username(), role, natsClusterConf)
		}
		if p := env["SPILLWAY_NATS_INBOX_PREFIX"]; p != internalInbox(role) {
			t.Errorf("%s: env SPILLWAY_NATS_INBOX_PREFIX %q, want %s", d.where(), p, internalInbox(role))
		}
	}
}

// ingressPeers are the from-peers of p's ingress rules that admit port.
// open is true when a rule admits port from anywhere (no from).
func ingressPeers(p manifest, port int) (peers []any, open bool) {
	for _, r := range getList(p.doc, "spec", "ingress") {
		ports := getList(r, "ports")
		match := len(ports) == 0
		for _, x := range ports {
			if n, _ := getInt(x, "port"); n == port {
				match = true
			}
		}
		if !match {
			continue
		}
		from := getList(r, "from")
		if len(from) == 0 {
			return nil, true
		}
		peers = append(peers, from...)
	}
	return peers, false
}

// TestK8sNetworkPolicies checks who may reach NATS, Redis and the
// admitter: NATS's client port admitters, workers and labelled clients;
// its monitoring port (no login) labelled monitors alone; Redis admitters
// and workers alone; the admitter's HTTP port labelled producers.
func TestK8sNetworkPolicies(t *testing.T) {
	_, ms := k8sBase(t)
	policy := func(selects string) manifest {
		for _, m := range ms {
			if m.kind() == "NetworkPolicy" && getString(m.doc, "spec", "podSelector", "matchLabels", "app.kubernetes.io/name") == selects {
				return m
			}
		}
		t.Fatalf("%s: no NetworkPolicy selecting the %s pods", k8sDir, selects)
		return manifest{}
	}
	admitter := map[string]any{"app.kubernetes.io/name": "spillway", "app.kubernetes.io/component": "admitter"}
	worker := map[string]any{"app.kubernetes.io/name": "spillway", "app.kubernetes.io/component": "worker"}
	for _, d := range []string{"spillway-admitter", "spillway-worker"} {
		labels := getMap(find(t, ms, "Deployment", d).doc, "spec", "template", "metadata", "labels")
		if !subset(admitter, labels) && !subset(worker, labels) {
			t.Errorf("Deployment %s: pod labels %v are not the ones the policies admit", d, labels)
		}
	}
	// peerIs reports whether peer selects pods with labels (in the
	// policy's namespace when it has no namespaceSelector).
	peerIs := func(peer any, labels map[string]any) bool {
		return subset(getMap(peer, "podSelector", "matchLabels"), labels)
	}
	onlyPods := func(where string, peers []any, allowed ...map[string]any) {
		for _, p := range peers {
			if getMap(p, "podSelector", "matchLabels") == nil || get(p, "ipBlock") != nil {
				t.Errorf("%s: a peer %v that is not a labelled pod selector", where, p)
				continue
			}
			if !slices.ContainsFunc(allowed, func(l map[string]any) bool { return peerIs(p, l) }) {
				t.Errorf("%s: peer %v is none of %v", where, p, allowed)
			}
		}
	}
	mustAdmit := func(where string, peers []any, l map[string]any) {
		if !slices.ContainsFunc(peers, func(p any) bool { return peerIs(p, l) && get(p, "namespaceSelector") == nil }) {
			t.Errorf("%s: does not admit %v", where, l)
		}
	}

	nats := policy("nats")
	natsClient := map[string]any{"spillway.dev/nats-client": "true"}
	peers, open := ingressPeers(nats, 4222)
	if open {
		t.Errorf("%s: port 4222 is open to every pod", nats.where())
	}
	mustAdmit(nats.where()+" port 4222", peers, admitter)
	mustAdmit(nats.where()+" port 4222", peers, worker)
	onlyPods(nats.where()+" port 4222", peers, admitter, worker, natsClient)
	if peers, open := ingressPeers(nats, 8222); open || len(peers) == 0 {
		t.Errorf("%s: the monitoring port 8222 (no login) must admit labelled monitors only", nats.where())
	} else {
		onlyPods(nats.where()+" port 8222", peers, map[string]any{"spillway.dev/nats-monitor": "true"})
	}
	if peers, open := ingressPeers(nats, 6222); open {
		t.Errorf("%s: the cluster port 6222 is open to every pod", nats.where())
	} else {
		onlyPods(nats.where()+" port 6222", peers, map[string]any{"app.kubernetes.io/name": "nats"})
	}

	redis := policy("redis")
	peers, open = ingressPeers(redis, 6379)
	if open {
		t.Errorf("%s: port 6379 is open to every pod", redis.where())
	}
	mustAdmit(redis.where(), peers, admitter)
	mustAdmit(redis.where(), peers, worker)
	onlyPods(redis.where(), peers, admitter, worker)
	for _, p := range peers {
		if get(p, "namespaceSelector") != nil {
			t.Errorf("%s: peer %v reaches Redis from other namespaces", redis.where(), p)
		}
	}

	var adm manifest
	for _, m := range ms {
		if m.kind() == "NetworkPolicy" && subset(getMap(m.doc, "spec", "podSelector", "matchLabels"), admitter) {
			adm = m
		}
	}
	if adm.doc == nil {
		t.Fatalf("%s: no NetworkPolicy selecting the admitter pods", k8sDir)
	}
	peers, _ = ingressPeers(adm, 8080)
	producer := map[string]any{"spillway.dev/producer": "true"}
	if !slices.ContainsFunc(peers, func(p any) bool { return peerIs(p, producer) }) {
		t.Errorf("%s: the HTTP port 8080 does not admit producers (%v)", adm.where(), producer)
	}
	for _, m := range ms {
		if m.kind() == "NetworkPolicy" && !strings.Contains(strings.Join(stringsOf(getList(m.doc, "spec", "policyTypes")), ","), "Ingress") {
			t.Errorf("%s: policyTypes lacks Ingress", m.where())
		}
	}
}
