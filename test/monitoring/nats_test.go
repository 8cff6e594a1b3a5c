package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// TestNATSExporterSource checks, without the exporter, what its
// consumer metrics are made of: prometheus-nats-exporter -jsz=all reads
// GET /jsz?consumers=true&config=true from the NATS monitoring port and
// makes one jetstream_consumer_* series per consumer_detail entry, from
// its num_pending, num_ack_pending and num_waiting (natsExporterMetrics).
// With an admitter and a worker on a NATS server with monitoring, the
// test finds both Spillway consumers there with those fields (READY's
// spillway-ready and GRANTS' spillway-grants; the backlog has none), and
// checks the dashboard's stream_name regex matches exactly the queue's
// READY and GRANTS streams.
func TestNATSExporterSource(t *testing.T) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, HTTPHost: "127.0.0.1", HTTPPort: -1,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats-server did not start within 10s")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	monitor := "http://" + srv.MonitorAddr().String()

	log := slog.New(slog.DiscardHandler)
	cfg := admittest.LoadConfig(t, fmt.Sprintf("nats: {url: %q}\nhttp: {listen: \"127.0.0.1:0\"}\n", srv.ClientURL())+queueYAML)
	adm, err := admitterd.Start(t.Context(), admitterd.Options{Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, "the admitter", adm) })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- workerd.Run(ctx, workerd.Options{NC: nc, JS: js, Config: cfg, Handlers: map[string]worker.Handler{testQueue: failingHandler}, Logger: log})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	want := map[string]string{ // stream → consumer
		queue.StreamName(testQueue, queue.Ready): worker.ReadyConsumer,
		queue.GrantsStreamName(testQueue):        worker.GrantsConsumer,
	}
	var found map[string]map[string]any // stream → consumer_detail entry
	deadline := time.Now().Add(20 * time.Second)
	for {
		found = consumerDetails(t, client, monitor+"/jsz?consumers=true&config=true")
		all := true
		for stream, consumer := range want {
			all = all && found[stream] != nil && found[stream]["name"] == consumer
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/jsz?consumers=true&config=true: want consumers %v, found %v", want, found)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for stream := range want {
		d := found[stream]
		t.Logf("/jsz: %s consumer %v: num_pending %v, num_ack_pending %v, num_waiting %v", stream, d["name"], d["num_pending"], d["num_ack_pending"], d["num_waiting"])
		for _, field := range []string{"num_pending", "num_ack_pending", "num_waiting", "num_redelivered"} {
			if _, ok := found[stream][field].(float64); !ok {
				t.Errorf("/jsz: consumer %s of %s: no number %s (the exporter's jetstream_consumer_%s)", found[stream]["name"], stream, field, field)
			}
		}
		// No cluster: the exporter labels the consumer is_consumer_leader="true".
		if c, ok := found[stream]["cluster"].(map[string]any); ok && c["leader"] != nil && c["leader"] != srv.Name() {
			t.Errorf("/jsz: consumer of %s has leader %v, not this server %s", stream, c["leader"], srv.Name())
		}
	}

	// The dashboard's stream_name matcher, $queue expanded, matches the
	// READY and GRANTS streams and not BACKLOG (whose one consumer, the drain
	// leader's headers-only feed, never acks: its ack pending is the depth) or DEAD
	// (Prometheus anchors regexes).
	matcher := regexp.MustCompile(`stream_name=~"([^"]+)"`)
	var regexes []string
	for where, expr := range readDashboard(t).expressions() {
		if !strings.Contains(expr, "jetstream_consumer_") {
			continue
		}
		m := matcher.FindStringSubmatch(expr)
		if m == nil {
			t.Errorf("%s: no stream_name matcher: %s", where, expr)
			continue
		}
		regexes = append(regexes, grafanaExpand(m[1]))
	}
	if len(regexes) == 0 {
		t.Fatal("no dashboard query uses jetstream_consumer_*")
	}
	for _, re := range slices.Compact(slices.Sorted(slices.Values(regexes))) {
		t.Logf("dashboard stream_name regex, $queue expanded: %s", re)
		r := regexp.MustCompile("^(?:" + re + ")$")
		for name, want := range map[string]bool{
			queue.StreamName(testQueue, queue.Ready):   true,
			queue.GrantsStreamName(testQueue):          true,
			queue.StreamName(testQueue, queue.Backlog): false,
			queue.StreamName(testQueue, queue.Dead):    false,
		} {
			if got := r.MatchString(name); got != want {
				t.Errorf("stream_name=~%q matches %s: %v, want %v", re, name, got, want)
			}
		}
	}
}

// consumerDetails GETs /jsz and returns, by stream name, the first
// consumer_detail entry of each stream.
func consumerDetails(t *testing.T, client *http.Client, u string) map[string]map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var jsz struct {
		AccountDetails []struct {
			StreamDetail []struct {
				Name           string           `json:"name"`
				ConsumerDetail []map[string]any `json:"consumer_detail"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.Unmarshal(b, &jsz); err != nil {
		t.Fatalf("%s: %v\n%s", u, err, b)
	}
	out := map[string]map[string]any{}
	for _, a := range jsz.AccountDetails {
		for _, s := range a.StreamDetail {
			if len(s.ConsumerDetail) > 0 {
				out[s.Name] = s.ConsumerDetail[0]
			}
		}
	}
	return out
}
