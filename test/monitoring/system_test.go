package monitoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// testQueue is the queue of the system under test. brokenQueue is an
// admit-only queue of the second admitter whose dead-letter stream is
// deleted once it runs, so reading it from JetStream fails at every
// scrape (spillway_queue_inspect_errors_total counts that). flowQueue
// has the flow-control features: per-key concurrency, per-key pushback,
// debounced jobs and actual costs.
const (
	testQueue   = "jobs"
	brokenQueue = "vanished"
	flowQueue   = "flow"
)

// system is Spillway as deploy/ runs it, in this process:
//
//   - dev, an `admitter --dev` (embedded JetStream, workers in the
//     process, the in-memory bucket store);
//   - shared, a second admitter on dev's JetStream whose redis.url is a
//     closed port with failure_mode local, so it decides in its failure
//     mode and counts store errors;
//   - a worker process's parts (workerd) on dev's JetStream with a
//     /metrics of its own.
//
// Each has its own registry with the Go and process collectors, as the
// binaries do. The handler fails every job whose payload is "fail", so
// jobs are retried and dead-lettered, and pushes back on "busy" ones.
type system struct {
	dev, shared       *admitterd.Service
	devReg, sharedReg *prometheus.Registry
	workerReg         *prometheus.Registry
	workerURL         string // the worker's /metrics server, http://host:port
	client            *http.Client
	// names say what each registry of gatherEach is.
	names []string
}

// failingHandler succeeds unless the payload is "fail", or "busy": then it
// answers as a downstream that pushes back, so the leak pauses.
func failingHandler(_ context.Context, j *queue.Job) error {
	switch string(j.Payload) {
	case "fail":
		return errors.New("monitoring test: this job always fails")
	case "busy":
		return retry.Pushback(errors.New("monitoring test: the downstream is busy"), 200*time.Millisecond)
	}
	return nil
}

// flowHandler runs flowQueue's jobs: "busy" is pushed back (its key
// pauses, for less time than its client takes to send the next busy
// job, so each one begins a pause), "invalid" reports an actual cost
// that cannot be settled, "cheap" and "dear" an actual cost below and
// above the job's, so units are refunded and charged. "slow" holds its
// key's slot longer than the others, so the second of a pair sent
// together finds its key at its max.
func flowHandler(ctx context.Context, j *queue.Job) error {
	hold := 30 * time.Millisecond
	switch string(j.Payload) {
	case "busy":
		return retry.Pushback(errors.New("monitoring test: the downstream is busy for this key"), 50*time.Millisecond)
	case "invalid":
		j.SetCostActual(-1)
	case "cheap":
		j.SetCostActual(0)
	case "dear":
		j.SetCostActual(j.Cost + 2)
	case "slow":
		hold = 150 * time.Millisecond
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	return nil
}

// closedPort is a local address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// queueYAML: a per-client leaky bucket small enough that a few clients
// get admitted, queued and rejected jobs; a backlog small enough to fill;
// two quick attempts, so failing jobs are retried once, then dead.
//
// flowQueue admits its load (a roomy token bucket), runs one job of a
// client at a time (so a client's second job waits for a slot), and a
// pushback pauses only the job's client.
const queueYAML = `
queues:
  - name: ` + testQueue + `
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 4/s, burst: 8, delay: 2}
    backlog: {capacity: 30, per_key_capacity: 12, leak_rate: 10/s}
    retry: {max_attempts: 2, initial: 20ms, max: 50ms}
    handler: {log: true}
  - name: ` + flowQueue + `
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 100/s, burst: 100}
    concurrency: [{name: per-client, key: "header:X-Client", max: 1}]
    backlog: {capacity: 200, leak_rate: 20/s, pushback: key}
    retry: {max_attempts: 2, initial: 20ms, max: 50ms}
    handler: {log: true}
`

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// startSystem starts the admitters and the worker, and a load of HTTP
// submissions to both admitters that runs until the test ends.
func startSystem(t *testing.T) *system {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	handlers := map[string]worker.Handler{testQueue: failingHandler, flowQueue: flowHandler}
	s := &system{
		devReg: newRegistry(), sharedReg: newRegistry(), workerReg: newRegistry(),
		names:  []string{"the dev admitter", "the admitter with Redis down", "the worker"},
		client: &http.Client{Timeout: 10 * time.Second},
	}
	t.Cleanup(s.client.CloseIdleConnections)

	devCfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
worker: {grace_period: 2s}
`, t.TempDir())+queueYAML)
	var err error
	s.dev, err = admitterd.Start(t.Context(), admitterd.Options{Config: devCfg, Dev: true, Registry: s.devReg, Handlers: handlers, Logger: log})
	if err != nil {
		t.Fatalf("starting the dev admitter: %v", err)
	}
	t.Cleanup(func() { shutdown(t, "the dev admitter", s.dev) })

	sharedCfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {url: %q}
redis: {url: "redis://%s/0", failure_mode: local, timeout: 50ms}
http: {listen: "127.0.0.1:0"}
`, s.dev.NATSURL(), closedPort(t))+queueYAML+`
  - name: `+brokenQueue+`
    limits: [{key: global, algorithm: token_bucket, rate: 1/s, burst: 1}]
    backlog: {capacity: 10, leak_rate: 1/s}
`)
	s.shared, err = admitterd.Start(t.Context(), admitterd.Options{Config: sharedCfg, Registry: s.sharedReg, Logger: log})
	if err != nil {
		t.Fatalf("starting the admitter with an unreachable Redis: %v", err)
	}
	t.Cleanup(func() { shutdown(t, "the admitter with an unreachable Redis", s.shared) })
	s.breakQueue(t)

	s.startWorker(t, sharedCfg, handlers, log)
	s.startLoad(t)
	return s
}

func shutdown(t *testing.T, what string, svc *admitterd.Service) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.Shutdown(ctx); err != nil {
		t.Errorf("shutting down %s: %v", what, err)
	}
}

// breakQueue deletes brokenQueue's dead-letter stream.
func (s *system) breakQueue(t *testing.T) {
	t.Helper()
	nc, err := nats.Connect(s.dev.NATSURL(), nats.Name("monitoring-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), queue.StreamName(brokenQueue, queue.Dead)); err != nil {
		t.Fatalf("deleting the dead-letter stream of %s: %v", brokenQueue, err)
	}
}

// reload reloads the dev admitter once with a good configuration and
// counts one bad one, as cmd/admitter does on SIGHUP with a good and a
// bad file, so spillway_config_reloads_total has both results.
func (s *system) reload(t *testing.T) {
	t.Helper()
	if err := s.dev.Reload(t.Context(), admittest.LoadConfig(t, fmt.Sprintf("nats: {url: %q}\n", s.dev.NATSURL())+queueYAML)); err != nil {
		t.Fatalf("reloading: %v", err)
	}
	s.dev.ReloadFailed()
}

// startWorker runs a worker process's parts on the dev admitter's
// JetStream, with pacing in its own memory, and serves its /metrics.
func (s *system) startWorker(t *testing.T, cfg *config.Config, handlers map[string]worker.Handler, log *slog.Logger) {
	t.Helper()
	nc, err := nats.Connect(s.dev.NATSURL(), nats.Name("monitoring-test-worker"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(s.workerReg, promhttp.HandlerOpts{Registry: s.workerReg}))
	s.workerURL = srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- workerd.Run(ctx, workerd.Options{NC: nc, JS: js, Config: cfg, Handlers: handlers, Registerer: s.workerReg, Logger: log})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
		srv.Close()
		nc.Close()
	})
}

// startLoad submits jobs from three clients to both admitters, about
// 60 a second in all (each client's limit is 4/s), one in five of them
// failing and about one in seven pushed back, until the test ends; every
// other tick a job of flowQueue (see submitFlow); and every 32nd tick a
// pair of slow flowQueue jobs from a client of their own, one after the
// other, so that the second waits for the first's slot of the key.
func (s *system) startLoad(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	targets := []string{"http://" + s.dev.HTTPAddr(), "http://" + s.shared.HTTPAddr()}
	go func() {
		defer close(done)
		tick := time.NewTicker(16 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			payload := "ok"
			switch {
			case i%5 == 0:
				payload = "fail"
			case i%7 == 3:
				payload = "busy"
			}
			s.submit(ctx, targets[i%2], fmt.Sprintf("client-%d", i%3), payload)
			if i%2 == 0 {
				s.submitFlow(ctx, targets[(i/2)%2], i/2)
			}
			if i%32 == 1 {
				for range 2 {
					s.post(ctx, targets[0], flowQueue, "client-pair", "slow", nil)
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// submit posts one job; the metrics count its answer.
func (s *system) submit(ctx context.Context, base, client, payload string) {
	s.post(ctx, base, testQueue, client, payload, nil)
}

// submitFlow posts flowQueue's job number n, from three clients in turn:
// in every six, one pushed back, one with an invalid actual cost, one
// cheaper and one dearer than submitted, and two debounced with one
// debounce key, the second of which supersedes the first (or a job of
// the previous six).
func (s *system) submitFlow(ctx context.Context, base string, n int) {
	payload := [...]string{"busy", "invalid", "cheap", "dear", "ok", "ok"}[n%6]
	var h http.Header
	if n%6 >= 4 {
		h = http.Header{spillway.HeaderDebounce: {"100ms"}, spillway.HeaderDebounceKey: {"monitoring"}}
	}
	s.post(ctx, base, flowQueue, fmt.Sprintf("client-%d", n%3), payload, h)
}

func (s *system) post(ctx context.Context, base, q, client, payload string, h http.Header) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/queues/"+q+"/jobs", strings.NewReader(payload))
	if err != nil {
		return
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("X-Client", client)
	resp, err := s.client.Do(req)
	if err != nil {
		return // the test is ending
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// gatherEach gathers each registry: the dev admitter (with its workers),
// the admitter with Redis down, the worker.
func (s *system) gatherEach(t *testing.T) [][]*dto.MetricFamily {
	t.Helper()
	var out [][]*dto.MetricFamily
	for _, reg := range []*prometheus.Registry{s.devReg, s.sharedReg, s.workerReg} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gathering metrics: %v", err)
		}
		out = append(out, mfs)
	}
	return out
}

// gather is gatherEach merged: every family with the samples of all.
func (s *system) gather(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	all := map[string]*dto.MetricFamily{}
	for _, mfs := range s.gatherEach(t) {
		for _, mf := range mfs {
			if have, ok := all[mf.GetName()]; ok {
				have.Metric = append(have.Metric, mf.Metric...)
				continue
			}
			all[mf.GetName()] = mf
		}
	}
	return all
}

// sample is the sum of the samples of family name whose labels include
// want (histograms: their counts).
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range mf.Metric {
		for k, v := range want {
			if !hasLabel(m, k, v) {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// describe lists the families and their samples, for failure messages.
func describe(mfs map[string]*dto.MetricFamily, prefix string) string {
	var b bytes.Buffer
	for name, mf := range mfs {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range mf.Metric {
			v, _ := sample(map[string]*dto.MetricFamily{name: {Metric: []*dto.Metric{m}}}, name, nil)
			fmt.Fprintf(&b, "  %s%v %g\n", name, m.Label, v)
		}
	}
	return b.String()
}
