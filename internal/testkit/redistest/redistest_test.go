package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// do runs one command on a fresh connection to addr.
func do(t *testing.T, addr string, args ...string) any {
	t.Helper()
	reply, err := command(t.Context(), addr, nil, "", "", args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return reply
}

func ping(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("PING %s: %v", s.Addr(), err)
	}
}

func requireRefused(t *testing.T, addr string) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err == nil {
		_ = c.Close()
		t.Fatalf("dial %s succeeded; want connection refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v; want connection refused", addr, err)
	}
}

// env returns a getenv seam that sees only vars, so tests can set REDIS_URL
// without os.Setenv (which would forbid t.Parallel).
func env(vars map[string]string) Option {
	return func(o *options) { o.getenv = func(k string) string { return vars[k] } }
}

// fatalTB records the first Fatalf and ends the goroutine, like testing.T.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fatalOf runs fn with a fatalTB in its own goroutine and returns what it
// failed with ("" if it returned normally).
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("fn neither returned nor failed within 30s")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

func TestStartPingKillRestart(t *testing.T) {
	t.Parallel()
	s := Start(t, WithOwnProcess())

	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(s.Addr()) {
		t.Errorf("Addr() = %q; want 127.0.0.1:PORT", s.Addr())
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q; want %q", s.URL(), want)
	}
	pid := s.Pid()
	if pid == 0 {
		t.Fatal("Pid() = 0 for a running child server")
	}
	ping(t, s)
	if got := do(t, s.Addr(), "CONFIG", "GET", "save"); fmt.Sprint(got) != "[save ]" {
		t.Errorf("CONFIG GET save = %v; want persistence off", got)
	}
	if got := do(t, s.Addr(), "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %v", got)
	}

	s.Kill()
	if s.Pid() != 0 {
		t.Errorf("Pid() = %d after Kill; want 0", s.Pid())
	}
	requireRefused(t, s.Addr())
	if err := s.Ping(t.Context()); err == nil {
		t.Error("Ping succeeded after Kill")
	}
	s.Kill() // killing a dead server is a no-op

	addr := s.Addr()
	s.Restart(t)
	if s.Addr() != addr {
		t.Errorf("Addr() = %q after Restart; want the same %q", s.Addr(), addr)
	}
	if s.Pid() == 0 || s.Pid() == pid {
		t.Errorf("Pid() = %d after Restart; want a new process (old %d)", s.Pid(), pid)
	}
	ping(t, s)
	if got := do(t, s.Addr(), "GET", "k"); got != nil {
		t.Errorf("GET k = %v after Restart; want an empty server", got)
	}

	// Restart of a running server replaces it.
	pid = s.Pid()
	s.Restart(t)
	if s.Pid() == pid {
		t.Error("Restart of a running server kept the old process")
	}
	ping(t, s)
}

func TestCleanupKillsServer(t *testing.T) {
	t.Parallel()
	var s *Server
	t.Run("owner", func(t *testing.T) { // not parallel: Run returns after its cleanups
		s = Start(t, WithOwnProcess())
		ping(t, s)
	})
	if s.Pid() != 0 {
		t.Errorf("Pid() = %d after the owning test ended; want 0", s.Pid())
	}
	requireRefused(t, s.Addr())
}

// Servers started in parallel tests are separate while they run. A port
// may be used again once its server is gone: with -parallel 2, later
// subtests start after earlier ones have ended and killed theirs.
func TestParallelServersAreSeparate(t *testing.T) {
	t.Parallel()
	const n = 4
	var (
		mu      sync.Mutex
		live    = map[string]int{} // address → the subtest whose server is on it
		started int
	)
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				s := Start(t, WithOwnProcess())
				mu.Lock()
				if other, ok := live[s.Addr()]; ok {
					t.Errorf("servers of subtests %d and %d both on %s", other, i, s.Addr())
				}
				live[s.Addr()] = i
				started++
				mu.Unlock()
				// Runs before Start's own cleanup kills the server.
				t.Cleanup(func() {
					mu.Lock()
					defer mu.Unlock()
					if live[s.Addr()] == i {
						delete(live, s.Addr())
					}
				})
				ping(t, s)
				do(t, s.Addr(), "SET", "who", fmt.Sprint(i))
				if got := do(t, s.Addr(), "DBSIZE"); got != int64(1) {
					t.Errorf("DBSIZE = %v; want 1 (a server of its own)", got)
				}
			})
		}
	})
	if started != n {
		t.Errorf("%d of %d servers started", started, n)
	}
}

func TestStartRetriesWhenPortTaken(t *testing.T) {
	t.Parallel()
	var lc net.ListenConfig
	taken, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	calls := 0
	picker := func(o *options) {
		o.pickPort = func() (int, error) {
			calls++
			if calls <= 2 {
				return takenPort, nil
			}
			return freePort()
		}
	}
	s := Start(t, WithOwnProcess(), picker)
	ping(t, s)
	if calls != 3 {
		t.Errorf("picked %d ports; want 3 (two taken, one free)", calls)
	}
	if s.Addr() == taken.Addr().String() {
		t.Errorf("server claims the taken port %s", s.Addr())
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithOwnProcess(), WithArgs("--maxmemory", "7mb"))
	if got := do(t, s.Addr(), "CONFIG", "GET", "maxmemory"); fmt.Sprint(got) != "[maxmemory 7340032]" {
		t.Errorf("CONFIG GET maxmemory = %v; want 7mb", got)
	}
}

func TestBadArgsFailWithServerOutput(t *testing.T) {
	t.Parallel()
	msg := fatalOf(t, func(tb testing.TB) { Start(tb, WithOwnProcess(), WithArgs("--no-such-option", "1")) })
	if !strings.Contains(msg, "exited during start") || !strings.Contains(msg, "no-such-option") {
		t.Errorf("Fatalf message = %q; want the server's complaint", msg)
	}
}

func TestRedisURL(t *testing.T) {
	t.Parallel()
	// A password exercises both WithArgs and REDIS_URL's user info.
	owned := Start(t, WithOwnProcess(), WithArgs("--requirepass", "s3cret"))
	url := "redis://:s3cret@" + owned.Addr() + "/0"
	if owned.URL() != url {
		t.Errorf("URL() = %q; want %q", owned.URL(), url)
	}
	ping(t, owned)
	if _, err := command(t.Context(), owned.Addr(), nil, "", "", "PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without the password = %v; want NOAUTH", err)
	}

	t.Run("uses it", func(t *testing.T) {
		t.Parallel()
		s := Start(t, env(map[string]string{"REDIS_URL": url}))
		if s.Addr() != owned.Addr() || s.URL() != url {
			t.Errorf("Addr, URL = %q, %q; want %q, %q", s.Addr(), s.URL(), owned.Addr(), url)
		}
		if s.Pid() != 0 {
			t.Errorf("Pid() = %d for an external server; want 0", s.Pid())
		}
		ping(t, s)
	})
	t.Run("WithOwnProcess ignores it", func(t *testing.T) {
		t.Parallel()
		s := Start(t, WithOwnProcess(), env(map[string]string{"REDIS_URL": url}))
		if s.Addr() == owned.Addr() || s.Pid() == 0 {
			t.Errorf("got Addr %q, Pid %d; want a child of its own", s.Addr(), s.Pid())
		}
		ping(t, s)
	})
	t.Run("Kill refuses", func(t *testing.T) {
		t.Parallel()
		msg := fatalOf(t, func(tb testing.TB) { Start(tb, env(map[string]string{"REDIS_URL": url})).Kill() })
		if !strings.Contains(msg, "WithOwnProcess") {
			t.Errorf("Fatalf message = %q; want advice to use WithOwnProcess", msg)
		}
		ping(t, owned)
	})
	t.Run("Restart refuses", func(t *testing.T) {
		t.Parallel()
		msg := fatalOf(t, func(tb testing.TB) { Start(tb, env(map[string]string{"REDIS_URL": url})).Restart(tb) })
		if !strings.Contains(msg, "WithOwnProcess") {
			t.Errorf("Fatalf message = %q; want advice to use WithOwnProcess", msg)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		bad := fmt.Sprintf("redis://:hidden@127.0.0.1:%d/0", port)
		msg := fatalOf(t, func(tb testing.TB) {
			Start(tb, env(map[string]string{"REDIS_URL": bad}), WithStartTimeout(200*time.Millisecond))
		})
		if !strings.Contains(msg, "does not answer PING") {
			t.Errorf("Fatalf message = %q; want it to say the server does not answer", msg)
		}
		if strings.Contains(msg, "hidden") {
			t.Errorf("Fatalf message %q shows the password", msg)
		}
	})
	t.Run("bad scheme", func(t *testing.T) {
		t.Parallel()
		msg := fatalOf(t, func(tb testing.TB) { Start(tb, env(map[string]string{"REDIS_URL": "http://x"})) })
		if !strings.Contains(msg, "scheme") {
			t.Errorf("Fatalf message = %q; want a complaint about the scheme", msg)
		}
	})
}

func TestMissingBinaryFailsLoudly(t *testing.T) {
	t.Parallel()
	noBinary := func(o *options) {
		o.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
		o.fallback = "/nonexistent/redis-server"
	}
	msg := fatalOf(t, func(tb testing.TB) { Start(tb, env(nil), noBinary) })
	if !strings.Contains(msg, "apt-get install -y redis-server, or set REDIS_URL") {
		t.Errorf("Fatalf message = %q; want it to say what to do", msg)
	}

	msg = fatalOf(t, func(tb testing.TB) {
		Start(tb, env(map[string]string{"REDIS_SERVER_BIN": "/nonexistent/redis-server"}))
	})
	if !strings.Contains(msg, "REDIS_SERVER_BIN") {
		t.Errorf("Fatalf message = %q; want it to name REDIS_SERVER_BIN", msg)
	}
}

func TestRedisServerBin(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin = fallbackBinary
	}
	noBinary := func(o *options) {
		o.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
		o.fallback = "/nonexistent/redis-server"
	}
	s := Start(t, WithOwnProcess(), env(map[string]string{"REDIS_SERVER_BIN": bin}), noBinary)
	ping(t, s)
}

func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^t:[0-9a-f]{16}:$`)
	seen := map[string]bool{}
	for range 100 {
		p := KeyPrefix(t)
		if !re.MatchString(p) {
			t.Fatalf("KeyPrefix = %q; want t:<16 hex>:", p)
		}
		if seen[p] {
			t.Fatalf("KeyPrefix repeated %q", p)
		}
		seen[p] = true
	}
}
