package monitoring

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// natsExporterMetrics are the metrics of prometheus-nats-exporter the
// dashboard and the alerts may use, with their labels, pinned to the
// version docker-compose.yml runs (natsio/prometheus-nats-exporter:0.17.3)
// and read from its collector/jsz.go (newJszCollector and Collect): with
// -jsz=all it GETs /jsz?consumers=true&config=true and every consumer of
// every stream gets
//
//	jetstream_consumer_num_pending      BuildFQName("jetstream", "consumer", "num_pending"), ConsumerInfo.NumPending
//	jetstream_consumer_num_ack_pending  … "num_ack_pending", ConsumerInfo.NumAckPending
//	jetstream_consumer_num_waiting      … "num_waiting", ConsumerInfo.NumWaiting
//	jetstream_consumer_num_redelivered  … "num_redelivered", ConsumerInfo.NumRedelivered
//
// with the labels consumerLabels: the server labels, the stream labels,
// then consumer_name, consumer_leader, is_consumer_leader ("true" on the
// consumer's leader, and when the consumer has no cluster: one server),
// consumer_desc, consumer_created. jetstream_stream_total_messages, with
// the stream labels, is the stream's State.Msgs. "jetstream" is
// collector.JetStreamSystem; the exporter's -prefix flag would replace it
// (compose does not set it). The exporter binary is not available to the
// tests (Debian does not package it); TestNATSExporterSource checks the
// /jsz fields these come from on a real server.
var natsExporterMetrics = func() map[string][]string {
	server := []string{"server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader"}
	stream := append(slices.Clone(server), "account", "account_id", "stream_name", "stream_leader", "is_stream_leader")
	consumer := append(slices.Clone(stream), "consumer_name", "consumer_leader", "is_consumer_leader", "consumer_desc", "consumer_created")
	return map[string][]string{
		"jetstream_consumer_num_pending":     consumer,
		"jetstream_consumer_num_ack_pending": consumer,
		"jetstream_consumer_num_waiting":     consumer,
		"jetstream_consumer_num_redelivered": consumer,
		"jetstream_stream_total_messages":    stream,
	}
}()

// prometheusMetrics are series Prometheus makes itself for every target.
var prometheusMetrics = map[string]bool{
	"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true,
	"scrape_samples_post_metric_relabeling": true, "scrape_series_added": true,
}

// targetLabels are labels Prometheus adds to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true}

// usedSelectors is every metric selector of the dashboard and the alert
// rules, keyed by where it is used.
func usedSelectors(t *testing.T) map[string][]selector {
	t.Helper()
	exprs := readDashboard(t).expressions()
	var rules ruleFile
	readYAML(t, alertsYML, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["rule "+r.Alert+r.Record] = r.Expr
		}
	}
	out := map[string][]selector{}
	for where, expr := range exprs {
		sels, err := metricSelectors(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
		out[where] = sels
	}
	return out
}

// exported says whether name is a series the gathered families produce,
// and which labels it has: a family's own name, or a histogram's _bucket
// (with le), _sum and _count, or a summary's _sum and _count.
func exported(mfs map[string]*dto.MetricFamily, name string) (labels map[string]bool, ok bool) {
	labelsOf := func(mf *dto.MetricFamily, extra ...string) map[string]bool {
		ls := map[string]bool{}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				ls[l.GetName()] = true
			}
		}
		for _, e := range extra {
			ls[e] = true
		}
		return ls
	}
	if mf, ok := mfs[name]; ok {
		return labelsOf(mf), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		mf, ok := mfs[base]
		if !ok {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			if suffix == "_bucket" {
				return labelsOf(mf, "le"), true
			}
			return labelsOf(mf), true
		case dto.MetricType_SUMMARY:
			if suffix != "_bucket" {
				return labelsOf(mf), true
			}
		}
	}
	return nil, false
}

// TestNoDeadPanels runs an admitter in dev mode, a second admitter whose
// Redis is down (failure mode local) and a worker, under load with jobs
// admitted, queued, rejected, retried and dead-lettered, gathers what they
// export, and checks that every metric the dashboard or an alert names is
// among it (or is the NATS exporter's, or Prometheus's own), with the
// labels its matchers use. The spillway_* metrics must pass promlint.
func TestNoDeadPanels(t *testing.T) {
	sys := startSystem(t)

	// Wait until every kind of event the metrics count has happened.
	want := []struct {
		name   string
		labels map[string]string
	}{
		{"spillway_decisions_total", map[string]string{"verdict": "admitted"}},
		{"spillway_decisions_total", map[string]string{"verdict": "queued"}},
		{"spillway_decisions_total", map[string]string{"verdict": "rejected"}},
		{"spillway_jobs_completed_total", map[string]string{"result": "succeeded"}},
		{"spillway_jobs_completed_total", map[string]string{"result": "retrying"}},
		{"spillway_jobs_completed_total", map[string]string{"result": "dead"}},
		{"spillway_dead_letters_total", nil},
		{"spillway_job_wait_seconds", nil},
		{"spillway_store_errors_total", map[string]string{"store": "redis"}},
		{"spillway_failure_mode_total", map[string]string{"mode": "local"}},
		{"spillway_failure_mode_active", map[string]string{"mode": "local"}},
		{"spillway_queue_inspect_errors_total", map[string]string{"queue": brokenQueue}},
		{"spillway_concurrency_waits_total", map[string]string{"queue": flowQueue}},
		{"spillway_key_pushback_pauses_total", map[string]string{"queue": flowQueue}},
		{"spillway_jobs_superseded_total", map[string]string{"queue": flowQueue}},
		{"spillway_cost_settled_units_total", map[string]string{"queue": flowQueue, "direction": "refunded"}},
		{"spillway_cost_settled_units_total", map[string]string{"queue": flowQueue, "direction": "charged"}},
		{"spillway_cost_settle_failures_total", map[string]string{"queue": flowQueue, "reason": "invalid"}},
	}
	deadline := time.Now().Add(45 * time.Second)
	var mfs map[string]*dto.MetricFamily
	for {
		mfs = sys.gather(t)
		var missing []string
		for _, w := range want {
			if v, _ := sample(mfs, w.name, w.labels); v <= 0 {
				missing = append(missing, fmt.Sprintf("%s%v", w.name, w.labels))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("under load for 45s, these never counted anything: %v\nspillway metrics:\n%s", missing, describe(mfs, "spillway_"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	sys.reload(t)
	mfs = sys.gather(t)

	var names []string
	for name := range mfs {
		names = append(names, name)
	}
	slices.Sort(names)
	t.Logf("%d metric families exported: %s", len(names), strings.Join(names, " "))

	missing := map[string][]string{} // metric → where it is used
	for where, sels := range usedSelectors(t) {
		for _, sel := range sels {
			var labels map[string]bool
			switch {
			case prometheusMetrics[sel.Metric]:
				labels = targetLabels
			case natsExporterMetrics[sel.Metric] != nil:
				labels = map[string]bool{}
				for _, l := range natsExporterMetrics[sel.Metric] {
					labels[l] = true
				}
			default:
				var ok bool
				if labels, ok = exported(mfs, sel.Metric); !ok {
					missing[sel.Metric] = append(missing[sel.Metric], where)
					continue
				}
			}
			for _, l := range sel.Labels {
				if !labels[l] && !targetLabels[l] {
					t.Errorf("%s: %s has no label %q (it has %v)", where, sel.Metric, l, sortedKeys(labels))
				}
			}
		}
	}
	// And the other way round: every spillway_* metric has a panel or an
	// alert.
	used := map[string]bool{}
	for _, sels := range usedSelectors(t) {
		for _, sel := range sels {
			used[sel.Metric] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(sel.Metric, suffix); ok {
					used[base] = true
				}
			}
		}
	}
	for _, name := range names {
		if strings.HasPrefix(name, "spillway_") && !used[name] {
			t.Errorf("%s is exported but no dashboard panel or alert uses it", name)
		}
	}

	for _, name := range sortedKeys(missing) {
		uses := missing[name]
		slices.Sort(uses)
		t.Errorf("dead: %s is not exported by the admitters or the worker (used by %s)", name, strings.Join(uses, "; "))
	}

	// promlint over what each process exports (one registry is one
	// /metrics page): the spillway_* metrics must be clean.
	for i, families := range sys.gatherEach(t) {
		problems, err := promlint.NewWithMetricFamilies(families).Lint()
		if err != nil {
			t.Fatalf("promlint: %v", err)
		}
		for _, p := range problems {
			if strings.HasPrefix(p.Metric, "spillway_") {
				t.Errorf("promlint, %s: %s: %s", sys.names[i], p.Metric, p.Text)
			} else {
				t.Logf("promlint, %s (not ours): %s: %s", sys.names[i], p.Metric, p.Text)
			}
		}
	}
}
