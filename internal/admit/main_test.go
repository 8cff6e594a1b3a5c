package admit_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
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
	nats *queuetest.Server
	nc   *nats.Conn
	// Core: the configuration, JetStream, publisher, store and idempotency.
	*admittest.Core
	reg *prometheus.Registry
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
	// now, if set, is the admitter's clock.
	now func() time.Time
	// options, if set, changes the admitter's options (its hooks).
	options func(*admit.Options)
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
	store, err := admit.NewFailover(o.primary, o.mode)
	if err != nil {
		t.Fatal(err)
	}
	b.Core = admittest.NewCore(t, b.nc, yaml, store)
	if o.staleAfter > 0 {
		b.Idempotency.StaleAfter = o.staleAfter
	}
	m := admitterd.NewAdmitMetrics(b.reg) // the events as admitterd counts them
	b.Store.OnError = func(error) { m.StoreError("redis") }
	b.Store.OnFallback = m.FailureMode
	opts := b.Options()
	opts.Observe = m.Observe
	if o.now != nil {
		opts.Now = o.now
	}
	if o.options != nil {
		o.options(&opts)
	}
	a, err := admit.New(b.Config, opts)
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

// msgs is the number of messages in a queue's stream.
func (b *testBundle) msgs(t *testing.T, q string, d queue.Destination) uint64 {
	t.Helper()
	return admittest.Msgs(t, b.JS, q, d)
}

// request is a submission to q keyed on X-Client.
func request(q, client string) *admit.Request {
	return &admit.Request{
		Queue:   q,
		Payload: []byte("job for " + client),
		Keys: func(name string) string {
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
