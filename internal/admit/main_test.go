package admit_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testBundle is what setup built around the admitter under test.
type testBundle struct {
	nats  *queuetest.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   *config.Config
	pub   *queue.Publisher
	store *admit.Failover
	idem  *admit.Idempotency
	reg   *prometheus.Registry
}

// setupOptions vary setup's admitter.
type setupOptions struct {
	// primary is the shared store (nil: the in-memory store).
	primary bucket.Store
	mode    config.FailureMode
	// nats reuses a server (another admitter on the same JetStream).
	nats *queuetest.Server
	// natsURL, if set, is where the admitter connects to nats (a proxy).
	natsURL string
	// staleAfter, if set, is the Idempotency's StaleAfter.
	staleAfter time.Duration
	// run starts Admitter.Run (backlog positions) until the test ends.
	run bool
}

// setup builds an admitter for the configuration yaml (queues with their
// streams in an embedded JetStream server of the test's own), with
// idempotency and metrics in a registry of its own.
func setup(t *testing.T, yaml string, o setupOptions) (*admit.Admitter, *testBundle) {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{nats: o.nats, reg: prometheus.NewRegistry()}
	if b.nats == nil {
		b.nats = queuetest.Start(t)
	}
	var err error
	if o.natsURL == "" {
		b.nc = b.nats.Connect(t)
	} else {
		if b.nc, err = nats.Connect(o.natsURL, nats.Name(t.Name())); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.nc.Close)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		t.Fatal(err)
	}
	b.cfg = loadConfig(t, yaml)
	for _, q := range b.cfg.Queues {
		c := q.Backlog
		c.Memory = true
		if err := queue.EnsureStreams(ctx, b.js, c); err != nil {
			t.Fatal(err)
		}
	}
	if b.pub, err = queue.NewPublisher(b.js, queue.DefaultMaxInFlight); err != nil {
		t.Fatal(err)
	}
	if b.store, err = admit.NewFailover(o.primary, o.mode); err != nil {
		t.Fatal(err)
	}
	if b.idem, err = admit.OpenIdempotency(ctx, b.js, time.Hour, 1, nil); err != nil {
		t.Fatal(err)
	}
	if o.staleAfter > 0 {
		b.idem.StaleAfter = o.staleAfter
	}
	m := admit.NewMetrics(b.reg)
	b.store.OnError = func(error) { m.StoreError("redis") }
	b.store.OnFallback = m.FailureMode
	a, err := admit.New(b.cfg, admit.Options{JS: b.js, Publisher: b.pub, Store: b.store, Idempotency: b.idem, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if o.run {
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Admitter.Run: %v", err)
			}
		})
	}
	return a, b
}

func loadConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil, config.Overrides{})
	if err != nil {
		t.Fatalf("config:\n%s\n%v", yaml, err)
	}
	return cfg
}

// msgs is the number of messages in a queue's stream.
func (b *testBundle) msgs(t *testing.T, q string, d queue.Destination) uint64 {
	t.Helper()
	s, err := b.js.Stream(context.Background(), queue.StreamName(q, d))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// request is a submission to q keyed on X-Client.
func request(q, client string) *admit.Request {
	return &admit.Request{
		Queue:   q,
		Payload: []byte("job for " + client),
		Header: func(name string) string {
			if name == "X-Client" {
				return client
			}
			return ""
		},
	}
}

func submit(t *testing.T, a *admit.Admitter, r *admit.Request) admit.Answer {
	t.Helper()
	ans, err := a.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("Submit(%s): %v", r.Queue, err)
	}
	return ans
}

// gateStore is a real memory store whose decisions wait at a gate: a test
// holds submissions in the middle of a decision, where a real store would
// be slow, and lets them go when it likes.
type gateStore struct {
	*bucket.Memory
	entered atomic.Int64
	arrived chan struct{} // one send per decision that reached the gate
	open    chan struct{}
	once    sync.Once
}

func newGateStore(t *testing.T) *gateStore {
	t.Helper()
	m, err := bucket.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	g := &gateStore{Memory: m, arrived: make(chan struct{}, 4096), open: make(chan struct{})}
	t.Cleanup(g.release) // never leave a submission waiting
	return g
}

func (g *gateStore) Decide(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	g.entered.Add(1)
	g.arrived <- struct{}{}
	select {
	case <-g.open:
	case <-ctx.Done():
		return bucket.Decision{}, ctx.Err()
	}
	return g.Memory.Decide(ctx, group, tiers, cost)
}

func (g *gateStore) release() { g.once.Do(func() { close(g.open) }) }

// waitArrived waits until n decisions have reached the gate.
func (g *gateStore) waitArrived(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-g.arrived:
		case <-deadline:
			t.Fatalf("only %d of %d decisions reached the gate within 10s", g.entered.Load(), n)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metricSum is the sum of a metric family's samples (counters and gauges).
func metricSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// samples is a metric family's samples by their labels, "name=value,…" in
// the order Gather sorts them (by label name).
func samples(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// wantSamples checks a metric family's samples, all of them.
func wantSamples(t *testing.T, reg prometheus.Gatherer, name string, want map[string]float64) {
	t.Helper()
	got := samples(t, reg, name)
	if !maps.Equal(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

// histogramCount is the number of observations of a histogram family.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}
