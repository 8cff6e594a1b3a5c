package door_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestServiceProbes runs the doors as admitterd assembles them: /livez
// answers while the process runs; /readyz says not ready while NATS is
// unreachable and ready again once it is back; /metrics shows decisions;
// a job's status is there for GET /v1/jobs/{id}.
func TestServiceProbes(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	cfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {url: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2}]
    backlog: {capacity: 10, leak_rate: 1/s}
`, srv.URL()))
	s, err := admitterd.Start(context.Background(), admitterd.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	base := "http://" + s.HTTPAddr()
	get := func(path string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
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
		return resp.StatusCode, resp.Header, string(b)
	}

	for path, body := range map[string]string{"/livez": "ok\n", "/readyz": "ready\n"} {
		if code, _, got := get(path); code != http.StatusOK || got != body {
			t.Errorf("GET %s: %d %q, want 200 %q", path, code, got, body)
		}
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/queues/q/jobs", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Client", "c")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := readResponse(t, resp)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.code, r.body)
	}
	var status string
	admittest.WaitFor(t, 10*time.Second, "the job's status record", func() bool {
		code, _, body := get(r.header.Get("Location"))
		status = body
		return code == http.StatusOK
	})
	if !strings.Contains(status, `"state":"`+string(spillway.StateAdmitted)+`"`) || !strings.Contains(status, r.reply.ID) {
		t.Errorf("GET %s: %s, want job %s admitted", r.header.Get("Location"), status, r.reply.ID)
	}
	if _, _, m := get("/metrics"); !strings.Contains(m, `spillway_decisions_total{queue="q",reason="limit",verdict="admitted"} 1`) {
		t.Errorf("/metrics does not count the admitted job:\n%s", grep(m, "spillway_decisions_total"))
	}

	srv.Shutdown()
	admittest.WaitFor(t, 10*time.Second, "/readyz to say not ready with NATS down", func() bool {
		code, h, body := get("/readyz")
		if code == http.StatusOK {
			return false
		}
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || h.Get("Content-Type") != spillway.ProblemContentType || !strings.Contains(body, spillway.ProblemUnavailable) {
			t.Fatalf("/readyz with NATS down: %d %v %s, want 503 %s with Retry-After", code, h, body, spillway.ProblemUnavailable)
		}
		return true
	})
	if code, _, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez with NATS down: %d, want 200 (the process lives)", code)
	}
	srv.Restart(t)
	admittest.WaitFor(t, 20*time.Second, "/readyz to say ready with NATS back", func() bool {
		code, _, _ := get("/readyz")
		return code == http.StatusOK
	})
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUnavailable: with the shared store unreachable and the failure mode
// closed, both doors refuse with 503 / unavailable and a Retry-After.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	rds := redistest.Start(t, redistest.WithOwnProcess())
	client, shared, err := conn.Redis(conn.RedisConfig{URL: rds.URL(), Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store, err := admit.NewFailover(shared, config.FailClosed)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, basicConfig, setupOptions{store: store})
	if r := b.post(t, "q", nil, "X-Client", "c"); r.code != http.StatusAccepted {
		t.Fatalf("Redis up: %d %s", r.code, r.body)
	}
	rds.Kill()
	for range 3 {
		r := b.post(t, "q", nil, "X-Client", "c")
		if r.code != http.StatusServiceUnavailable || r.problem.Type != spillway.ProblemUnavailable || r.problem.RetryAfterMS <= 0 {
			t.Fatalf("Redis down, closed: %d %s, want 503 %s with retry_after_ms", r.code, r.body, spillway.ProblemUnavailable)
		}
		if got, want := r.header.Get("Retry-After"), strconv.FormatInt((r.problem.RetryAfterMS+999)/1000, 10); got != want {
			t.Errorf("Retry-After %q, want %s (retry_after_ms %d rounded up)", got, want, r.problem.RetryAfterMS)
		}
	}
	rep := ask(t, b.nats.Connect(t), natsMsg("q", nil, "X-Client", "c"))
	if rep.Status != spillway.Failed || rep.Type != spillway.ProblemUnavailable || rep.RetryAfterMS <= 0 {
		t.Errorf("over NATS: %+v, want status error, unavailable, retry_after_ms", rep)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 1 {
		t.Errorf("%d jobs stored, want 1", n)
	}
}
