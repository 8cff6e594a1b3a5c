package workerd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/testkit/logtest"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A job whose HTTP handler's URL carries a user, a password and a token,
// and whose downstream answers 500 with a body that echoes a secret past
// its first bytes, is recorded dead with a last_error — which every submit
// key may read — and logged, neither telling the URL's user info or query
// nor the body's tail.
func TestHandlerErrorTellsNoSecret(t *testing.T) {
	body := "upstream failed: " + strings.Repeat("x", 100) + "\x00\x1b[2J TAIL api_key=SECRET"
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Connection", "close") // no idle connection outlives the test
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(hook.Close)
	hookURL := strings.Replace(hook.URL, "http://", "http://user:pass@", 1) + "/hook?token=SECRET"

	srv := queuetest.Start(t)
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	yaml := fmt.Sprintf(`
nats: {url: %q}
queues:
  - name: hook
    limits: [{key: global, rate: 10/s}]
    backlog: {leak_rate: 10/s}
    retry: {max_attempts: 1}
    handler: {http: {url: %q}}
`, srv.URL(), hookURL)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(t.Context())
	p, err := workerd.Connect(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, workerd.Options{}, func(*workerd.Pool) { close(started) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		p.Close()
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not start within 20s")
	}

	js := srv.JetStream(t)
	pub, err := queue.NewPublisher(js, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := queue.NewJobID("hook")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(t.Context(), queue.Backlog, &queue.Job{ID: id, Queue: "hook", Key: "k", Cost: 1, Payload: []byte("x"), EnqueuedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st, err := jobstatus.OpenExisting(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	var rec jobstatus.Record
	for deadline := time.Now().Add(20 * time.Second); rec.State != spillway.StateDead; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the job's record is %+v, want it dead", rec)
		}
		rec, _ = st.Get(t.Context(), id) // not found until the worker records it
	}
	if want := "POST " + hook.URL + "/hook: 500 Internal Server Error: upstream failed: xxx"; !strings.Contains(rec.LastError, want) {
		t.Errorf("last_error %q, want it to hold %q", rec.LastError, want)
	}
	for what, text := range map[string]string{"last_error": rec.LastError, "the logs": logs.String()} {
		for _, secret := range []string{"user", "pass", "SECRET", "TAIL"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s tell %q:\n%s", what, secret, text)
			}
		}
	}
}
