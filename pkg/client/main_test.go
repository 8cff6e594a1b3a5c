package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// quietRedis drops go-redis's own log lines: TestUnavailable's admitter
// has an unreachable Redis on purpose.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	code := m.Run()
	stopShared() // the examples' admitter, before looking for leaks
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testKey is the API key the admitters of these tests take.
const testKey = "client-test-key-0123456789"

// testConfig: queue "limited" (per X-Client, 1 admitted at once and 2
// more queued, due a minute apart; no worker, so queued jobs stay
// queued) and queue "work" (generous; its worker fails the payload
// "fail" for good, and succeeds every other one).
const testConfig = `
nats: {listen: "127.0.0.1:0"}
http: {listen: "127.0.0.1:0", max_body_bytes: 64, api_keys_file: keys}
queues:
  - name: limited
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2, delay: 0}
    backlog: {capacity: 10, leak_rate: 1/m}
  - name: work
    limits:
      - {key: global, algorithm: token_bucket, rate: 1000/s, burst: 1000}
    backlog: {capacity: 100, leak_rate: 100/s}
    retry: {max_attempts: 1}
`

// workHandler is the worker of queue "work".
func workHandler(_ context.Context, j *queue.Job) error {
	if string(j.Payload) == "fail" {
		return errors.New("told to fail")
	}
	return nil
}

// admitter is an admitter in dev mode — an embedded JetStream server and
// the workers in the same process — with both doors on random ports.
type admitter struct {
	*admitterd.Service
	dir string
}

// startAdmitter starts an admitter of yaml in dir (its keys file holds
// testKey); extra is appended to the YAML's top level.
func startAdmitter(dir, yaml string) (*admitter, error) {
	if err := os.WriteFile(filepath.Join(dir, "keys"), []byte(testKey+"\n"), 0o600); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "spillway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	cfg, err := config.LoadDev(path, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		return nil, err
	}
	cfg.NATS.StoreDir = filepath.Join(dir, "jetstream")
	s, err := admitterd.Start(context.Background(), admitterd.Options{
		Config: cfg, Dev: true, Logger: slog.New(slog.DiscardHandler),
		Handlers: map[string]worker.Handler{"work": workHandler},
	})
	if err != nil {
		return nil, err
	}
	return &admitter{Service: s, dir: dir}, nil
}

func (a *admitter) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return a.Shutdown(ctx)
}

func (a *admitter) httpURL() string { return "http://" + a.HTTPAddr() }

// setup starts an admitter of testConfig (or yaml) for t.
func setup(t *testing.T, yaml ...string) *admitter {
	t.Helper()
	y := testConfig
	if len(yaml) > 0 {
		y = yaml[0]
	}
	a, err := startAdmitter(t.TempDir(), y)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("stopping the admitter: %v", err)
		}
	})
	return a
}

// connect is a NATS connection to a's server, closed when t ends.
func (a *admitter) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(a.NATSURL(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// must(f())(t) is f's value, failing t on f's error.
func must[T any](v T, err error) func(testing.TB) T {
	return func(tb testing.TB) T {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
}
