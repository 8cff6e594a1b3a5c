package deployfiles

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

const natsClusterConf = "deploy/nats/cluster/nats.conf"

// TestNATSClusterConfig parses the cluster configuration with nats-server's
// own parser, as each of the three pods would (SERVER_NAME is the pod
// name), and checks the durability profile and the routes.
func TestNATSClusterConfig(t *testing.T) {
	_, ms := k8sBase(t)
	so := find(t, ms, "ScaledObject", "spillway-worker")
	endpoint := getString(getList(so.doc, "spec", "triggers")[0], "metadata", "natsServerMonitoringEndpoint")
	headless, _, _ := strings.Cut(endpoint, ".")
	headless, _, _ = strings.Cut(headless, ":")

	for i := range 3 {
		pod := fmt.Sprintf("nats-%d", i)
		t.Run(pod, func(t *testing.T) {
			t.Setenv("SERVER_NAME", pod)
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
				t.Errorf("%s: monitoring port %d, want 8222 (the exporter, KEDA and the probes use it)", natsClusterConf, opts.HTTPPort)
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
					t.Errorf("%s: route host %q, want %s (pod nats-%d behind the headless service %s that the KEDA trigger uses)",
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
