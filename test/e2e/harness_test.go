// Package e2e runs Spillway as people run it: the admitter and worker
// binaries as separate processes against one JetStream server and one
// Redis, with a webhook in the test recording every job that reaches it.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/testkit/proc"
)

// bins holds the built admitter and worker binaries.
var bins struct {
	admitter, worker, spillctl string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spillway-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bins.admitter = filepath.Join(dir, "admitter")
	bins.worker = filepath.Join(dir, "worker")
	bins.spillctl = filepath.Join(dir, "spillctl")
	// One go build for the three, so that it compiles and links them in
	// parallel; -o names a directory, and each binary takes its package's
	// name.
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", dir+string(filepath.Separator), "../../cmd/admitter", "../../cmd/worker", "../../cmd/spillctl")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the commands:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			// nats-server 2.15.2: a stream's file store opened by a
			// request racing the embedded server's shutdown can outlive
			// Shutdown and WaitForShutdown — its state-flush loop and its
			// access-time ticker (seen once in CI). The server's, not ours.
			goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
			goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// process is a running admitter or worker.
type process struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	addr string // the admitter's HTTP address
	done chan struct{}
	err  error
}

var (
	admitterLine = regexp.MustCompile(`^spillway admitter: http://(\S+)`)
	workerLine   = regexp.MustCompile(`^spillway worker: metrics on http://(\S+)/metrics`)
)

// start runs a binary and waits for its ready line on stdout.
func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	proc.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &process{t: t, name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, "stdout:", line)
			for _, re := range []*regexp.Regexp{admitterLine, workerLine} {
				if m := re.FindStringSubmatch(line); m != nil {
					select {
					case ready <- m[1]:
					default:
					}
				}
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log (last 4 KiB):\n%s", name, tail(b, 4096))
		}
	})
	select {
	case p.addr = <-ready:
	case <-p.done:
		b, _ := os.ReadFile(logPath)
		t.Fatalf("%s exited before it was ready (%v):\n%s", name, p.err, tail(b, 4096))
	case <-time.After(60 * time.Second):
		b, _ := os.ReadFile(logPath)
		t.Fatalf("%s not ready within 60s:\n%s", name, tail(b, 4096))
	}
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *process) signal(s syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(s)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to d for a clean exit.
func (p *process) stop(d time.Duration) error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.name, d)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// hit is one request that reached the webhook: one handler execution.
type hit struct {
	ID      string
	Attempt int
	At      time.Time
	Key     string
	Path    string
	// Status is what the webhook answered (0 while the answer is being
	// decided).
	Status int
}

// webhook records the jobs workers POST to it.
type webhook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []hit
	// status answers every request (default 200) unless respond is set.
	status int
	// respond, if set, decides each answer; it runs outside the lock and
	// may block (a slow handler) until the request's context ends.
	respond func(r *http.Request, h hit) int
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{status: http.StatusOK}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a, _ := strconv.Atoi(r.Header.Get("Spillway-Attempt"))
		h := hit{ID: r.Header.Get("Spillway-Job-Id"), Attempt: a, At: time.Now(), Key: r.Header.Get("Spillway-Key"), Path: r.URL.Path}
		w.mu.Lock()
		i := len(w.hits)
		w.hits = append(w.hits, h)
		st, respond := w.status, w.respond
		w.mu.Unlock()
		if respond != nil {
			st = respond(r, h)
		}
		w.mu.Lock()
		w.hits[i].Status = st
		w.mu.Unlock()
		rw.WriteHeader(st)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) snapshot() []hit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]hit(nil), w.hits...)
}

// countByID counts the webhook's hits per job id.
func (w *webhook) countByID() map[string]int {
	n := map[string]int{}
	for _, h := range w.snapshot() {
		n[h.ID]++
	}
	return n
}

// waitFor polls cond every 50ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func decodeJSON(t *testing.T, r io.Reader, v any) {
	t.Helper()
	if err := json.NewDecoder(r).Decode(v); err != nil {
		t.Fatalf("decoding JSON: %v", err)
	}
}

// get is a GET with a context, as the linter wants.
func get(client *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return client.Do(req)
}
