package workerd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// keyWebhook is a downstream that records every call: when it came, for
// which key and job, and what it answered. It answers key P 429 with
// Retry-After: 2 until busyUntil, everything else 200.
type keyWebhook struct {
	mu        sync.Mutex
	busyUntil time.Time
	calls     []keyCall
}

type keyCall struct {
	at, answered time.Time
	key, id      string
	status       int
}

func (h *keyWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	key, id := r.Header.Get(spillway.HeaderKey), r.Header.Get(spillway.HeaderJobID)
	h.mu.Lock()
	defer h.mu.Unlock()
	status := http.StatusOK
	if key == "P" && at.Before(h.busyUntil) {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "2")
	}
	w.WriteHeader(status)
	h.calls = append(h.calls, keyCall{at: at, answered: time.Now(), key: key, id: id, status: status})
}

func (h *keyWebhook) snapshot() []keyCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]keyCall(nil), h.calls...)
}

// With backlog.pushback: key, a downstream's 429 pauses only the key it
// answered for, across two worker pools (two processes' worth of
// workerd) sharing one JetStream: the other key takes the whole leak
// meanwhile and is done long before the pause ends; no job of the paused
// key starts inside its Retry-After; every job runs, none dead-lettered.
func TestKeyPushbackPausesOnlyItsKey(t *testing.T) {
	const perKey, retryAfter = 16, 2 * time.Second
	srv := queuetest.Start(t)
	hook := &keyWebhook{}
	web := httptest.NewServer(hook)
	t.Cleanup(web.Close)
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	yaml := fmt.Sprintf(`
nats: {url: %q}
queues:
  - name: kp
    limits: [{key: global, rate: 10/s}]
    backlog: {leak_rate: 20/s, pushback: key}
    retry: {max_attempts: 5, initial: 100ms, max: 5s}
    handler: {http: {url: %q}}
`, srv.URL(), web.URL)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Queue("kp").Backlog.Pushback; got != queue.PushbackKey {
		t.Fatalf("backlog.pushback read as %q, want key", got)
	}
	js := srv.JetStream(t)
	var regs []*prometheus.Registry
	for range 2 {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		ctx, cancel := context.WithCancel(t.Context())
		pool, err := workerd.Start(ctx, workerd.Options{
			NC: srv.Connect(t), JS: js, Config: cfg, Registerer: reg, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- pool.Wait() }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Wait: %v", err)
			}
		})
	}
	// Both pools lead or follow before the burst: the drain is running.
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	burst := time.Now()
	hook.mu.Lock()
	hook.busyUntil = burst.Add(2 * time.Second)
	hook.mu.Unlock()
	for _, key := range []string{"P", "Q"} {
		for range perKey {
			id, err := queue.NewJobID("kp")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pub.Publish(t.Context(), queue.Backlog, &queue.Job{ID: id, Queue: "kp", Key: key, Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	burstEnd := time.Now()

	done := func(calls []keyCall, key string) map[string]time.Time {
		ok := map[string]time.Time{}
		for _, c := range calls {
			if c.key == key && c.status == http.StatusOK {
				ok[c.id] = c.answered
			}
		}
		return ok
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		calls := hook.snapshot()
		if len(done(calls, "P")) == perKey && len(done(calls, "Q")) == perKey {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d of %d P jobs and %d of %d Q jobs done", len(done(calls, "P")), perKey, len(done(calls, "Q")), perKey)
		}
		time.Sleep(20 * time.Millisecond)
	}
	calls := hook.snapshot()
	sort.Slice(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })

	var lastQ time.Time
	for _, at := range done(calls, "Q") {
		if at.After(lastQ) {
			lastQ = at
		}
	}
	t.Logf("Q's %d jobs done %v after the burst (published in %v)", perKey, lastQ.Sub(burstEnd).Round(time.Millisecond), burstEnd.Sub(burst).Round(time.Millisecond))
	if d := lastQ.Sub(burstEnd); d > 2*time.Second {
		t.Errorf("Q's jobs were done %v after the burst, want ≤ 2s: P's pushback held Q back", d)
	}
	pushed := 0
	for _, c := range calls {
		if c.key != "P" || c.status != http.StatusTooManyRequests {
			continue
		}
		pushed++
		for _, s := range calls {
			if s.key == "P" && s.at.After(c.answered) && s.at.Before(c.answered.Add(retryAfter)) {
				t.Errorf("a P job started %v after a 429 answered with Retry-After: 2", s.at.Sub(c.answered).Round(time.Millisecond))
			}
		}
	}
	if pushed == 0 {
		t.Fatal("no P job was answered 429: the test did not push back")
	}
	t.Logf("%d P calls answered 429; %d calls in all", pushed, len(calls))

	dead, err := js.Stream(t.Context(), queue.StreamName("kp", queue.Dead))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dead.Info(t.Context()); err != nil || info.State.Msgs != 0 {
		t.Errorf("dead letters: %+v (%v), want none", info.State, err)
	}
	var pauses float64
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "spillway_key_pushback_pauses_total" {
				for _, m := range mf.GetMetric() {
					pauses += m.GetCounter().GetValue()
				}
			}
		}
	}
	if pauses < 1 {
		t.Errorf("spillway_key_pushback_pauses_total summed over both pools: %v, want ≥ 1", pauses)
	}
}
