package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/proc"
)

// DefaultStartTimeout is how long Start and Restart wait for a new server to
// answer PING (and how long Start waits for a REDIS_URL server).
const DefaultStartTimeout = 10 * time.Second

// startAttempts is how many ports Start tries, and how many times Restart
// tries its own port, before giving up.
const startAttempts = 5

// fallbackBinary is where Debian's redis-server package puts the server.
const fallbackBinary = "/usr/bin/redis-server"

// errPortTaken means the server could not bind its port; another try may work.
var errPortTaken = errors.New("redistest: port already in use")

// Option configures Start.
type Option func(*options)

type options struct {
	args         []string
	startTimeout time.Duration
	ownProcess   bool

	// Seams for this package's own tests.
	getenv   func(string) string
	lookPath func(string) (string, error)
	fallback string
	pickPort func() (int, error)
}

// WithArgs appends arguments to the redis-server command line, after the
// package's own, so they override them: WithArgs("--maxmemory", "1mb").
// Ignored when REDIS_URL is used.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// WithStartTimeout sets how long to wait for the server to answer PING.
// The default is DefaultStartTimeout.
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.startTimeout = d }
}

// WithOwnProcess makes Start launch a child server even if REDIS_URL is set.
// Tests that call Kill or Restart need it.
func WithOwnProcess() Option {
	return func(o *options) { o.ownProcess = true }
}

func newOptions(opts []Option) options {
	o := options{
		startTimeout: DefaultStartTimeout,
		getenv:       os.Getenv,
		lookPath:     exec.LookPath,
		fallback:     fallbackBinary,
		pickPort:     freePort,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Server is a Redis server for one test: a child process owned by the test, or
// the server named by REDIS_URL. Its methods are safe for concurrent use.
type Server struct {
	tb       testing.TB // the test that called Start, for Kill's failures
	external bool

	user, password string // the credentials; password "" without one

	// External servers only.
	url       string
	addr      string
	tlsConfig *tls.Config

	// Child servers only.
	bin          string
	dir          string
	conf         string // a config file before the arguments ("" none); sentinels run on one
	args         []string
	startTimeout time.Duration

	mu       sync.Mutex
	port     int      // guarded by mu
	proc     *process // guarded by mu; nil when not running
	launches int      // guarded by mu; numbers the log files
	logPath  string   // guarded by mu; the latest launch's log file
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	output bytes.Buffer  // stdout and stderr; read only after done is closed
	done   chan struct{} // closed when the process has been reaped
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill() // os.ErrProcessDone if it already exited
	<-p.done
}

// Start returns a running Redis server for tb: a new redis-server child on a
// random port of 127.0.0.1 that is killed in tb.Cleanup, or, if REDIS_URL is
// set and WithOwnProcess is not given, the server REDIS_URL names (see the
// package documentation). It fails tb if no server can be had; it never skips.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	o := newOptions(opts)
	if !o.ownProcess {
		if raw := o.getenv("REDIS_URL"); raw != "" {
			return startExternal(tb, raw, o)
		}
	}

	bin := findBinary(tb, o)
	dir := tb.TempDir() // before Cleanup below, so it is removed after the kill
	s := &Server{
		tb:           tb,
		bin:          bin,
		dir:          dir,
		args:         o.args,
		startTimeout: o.startTimeout,
	}
	if pw, ok := requirePass(o.args); ok {
		s.password = pw
	}
	tb.Cleanup(func() {
		s.stop()
		if tb.Failed() {
			tb.Logf("redistest: tail of %s:\n%s", s.currentLog(), s.logTail(20))
		}
	})

	var errs []error
	for range startAttempts {
		port, err := o.pickPort()
		if err != nil {
			tb.Fatalf("redistest: finding a free port: %v", err)
		}
		err = s.launch(port)
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) {
			tb.Fatalf("redistest: starting %s: %v", bin, err)
		}
		errs = append(errs, err)
	}
	tb.Fatalf("redistest: starting %s failed %d times:\n%v", bin, startAttempts, errors.Join(errs...))
	return nil
}

// Addr returns the server's address, "127.0.0.1:PORT" for a child server.
func (s *Server) Addr() string {
	if s.external {
		return s.addr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns the server's URL: "redis://127.0.0.1:PORT/0" for a child
// server ("redis://:PASSWORD@127.0.0.1:PORT/0" if WithArgs set
// --requirepass) and REDIS_URL itself for an external one.
func (s *Server) URL() string {
	if s.external {
		return s.url
	}
	u := url.URL{Scheme: "redis", Host: s.Addr(), Path: "/0"}
	if s.password != "" {
		u.User = url.UserPassword("", s.password)
	}
	return u.String()
}

// Pid returns the process id of the running child server, or 0 when it is
// not running (after Kill) or the server is external.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill sends SIGKILL to the child server and waits until it has exited, so
// that connections to Addr are refused when Kill returns. Killing a server
// that is not running does nothing. Kill fails the test that called Start if
// the server is external (see WithOwnProcess).
func (s *Server) Kill() {
	if s.external {
		s.tb.Helper()
		s.tb.Fatalf("redistest: Kill needs a server this test owns, but REDIS_URL is set: pass redistest.WithOwnProcess() to Start")
		return
	}
	s.stop()
}

// Restart starts a new, empty child server on the same port, killing the
// current one first if it is still running, and waits until it answers PING.
// It fails tb if the server is external or does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if s.external {
		tb.Fatalf("redistest: Restart needs a server this test owns, but REDIS_URL is set: pass redistest.WithOwnProcess() to Start")
		return
	}
	s.stop()
	s.mu.Lock()
	port := s.port
	s.mu.Unlock()

	var errs []error
	for attempt := range startAttempts {
		err := s.launch(port)
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) {
			tb.Fatalf("redistest: restarting %s on port %d: %v", s.bin, port, err)
		}
		errs = append(errs, err)
		time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
	}
	tb.Fatalf("redistest: restarting %s on port %d failed %d times:\n%v", s.bin, port, startAttempts, errors.Join(errs...))
}

// Ping sends PING over a new connection (authenticated, if the server has a
// password) and reports whether the server answered PONG.
func (s *Server) Ping(ctx context.Context) error {
	reply, err := s.do(ctx, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("redistest: PING answered %q", reply)
	}
	return nil
}

// KeyPrefix returns a random prefix, unique to the calling test, for every key
// the test writes: "t:" + 16 hex digits + ":". It holds no hash tag ('{' or
// '}'), so a test can add its own ("t:9f..:{key}:tokens") for Redis Cluster.
// With REDIS_URL, where tests share a keyspace, every test must use one.
func KeyPrefix(tb testing.TB) string {
	tb.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "t:" + hex.EncodeToString(b[:]) + ":"
}

// launch starts redis-server on port and waits until it answers as itself.
func (s *Server) launch(port int) error {
	// A log file per launch, so that one launch's errors are not read as
	// another's.
	s.mu.Lock()
	s.launches++
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.launches))
	s.logPath = logPath
	s.mu.Unlock()

	var args []string
	if s.conf != "" {
		args = append(args, s.conf, "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", logPath,
		"--daemonize", "no",
	)
	args = append(args, s.args...)
	p := &process{
		// Not tied to a context: the process lives until Kill, Restart or
		// the test's cleanup, which all kill it and wait for it.
		cmd:  exec.CommandContext(context.Background(), s.bin, args...),
		done: make(chan struct{}),
	}
	p.cmd.Dir = s.dir
	p.cmd.Stdout = &p.output
	p.cmd.Stderr = &p.output
	proc.SetParentDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = p.cmd.Wait() // the exit status is reported from the log instead
		close(p.done)
	}()

	s.mu.Lock()
	s.port = port
	s.proc = p
	s.mu.Unlock()

	if err := s.waitReady(p, port); err != nil {
		s.stop()
		return err
	}
	return nil
}

// waitReady polls until the server on port answers INFO with p's pid, p
// exits, or the start timeout passes.
func (s *Server) waitReady(p *process, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(s.startTimeout)
	for {
		select {
		case <-p.done:
			return s.exitError(p, port)
		default:
		}
		pid, err := s.serverPID(addr)
		if err == nil {
			if pid == p.cmd.Process.Pid {
				return nil
			}
			// Another server owns the port; ours will fail to bind it.
			return fmt.Errorf("%w: port %d is answered by pid %d, not ours (%d)", errPortTaken, port, pid, p.cmd.Process.Pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %d) did not answer on %s within %v: %w\nlog:\n%s",
				p.cmd.Process.Pid, addr, s.startTimeout, err, s.logTail(20))
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// serverPID asks the server at addr for its process id.
func (s *Server) serverPID(addr string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	reply, err := command(ctx, addr, nil, s.user, s.password, "INFO", "server")
	if err != nil {
		return 0, err
	}
	info, _ := reply.(string)
	v, ok := infoField(info, "process_id")
	if !ok {
		return 0, errors.New("redistest: INFO server has no process_id")
	}
	return strconv.Atoi(v)
}

// exitError explains why p exited during start.
func (s *Server) exitError(p *process, port int) error {
	out := strings.TrimSpace(p.output.String())
	log := s.logTail(20)
	if strings.Contains(out, "Address already in use") || strings.Contains(log, "Address already in use") {
		return fmt.Errorf("%w: port %d", errPortTaken, port)
	}
	return fmt.Errorf("redis-server exited during start (%v)\noutput:\n%s\nlog:\n%s", p.cmd.ProcessState, out, log)
}

// stop kills the running child, if any, and waits for it.
func (s *Server) stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

func (s *Server) currentLog() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logPath
}

// logTail returns the last n lines of the latest launch's log file.
func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(s.currentLog())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startExternal describes the server REDIS_URL names and checks it answers.
func startExternal(tb testing.TB, raw string, o options) *Server {
	tb.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("redistest: REDIS_URL is not a URL: %v", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		tb.Fatalf("redistest: REDIS_URL=%s: scheme must be redis or rediss", u.Redacted())
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		tb.Fatalf("redistest: REDIS_URL=%s has no host", u.Redacted())
	}
	if port == "" {
		port = "6379"
	}
	s := &Server{
		tb:       tb,
		external: true,
		url:      raw,
		addr:     net.JoinHostPort(host, port),
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			s.user, s.password = u.User.Username(), pw
		}
	}
	if u.Scheme == "rediss" {
		s.tlsConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.startTimeout)
	defer cancel()
	for {
		err := s.Ping(ctx)
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			tb.Fatalf("redistest: REDIS_URL=%s does not answer PING within %v: %v (unset REDIS_URL to let tests start their own redis-server)",
				u.Redacted(), o.startTimeout, err)
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// findBinary locates redis-server or fails tb saying how to get one.
func findBinary(tb testing.TB, o options) string {
	tb.Helper()
	p, err := lookupBinary(o)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return p
}

// lookupBinary locates redis-server or says how to get one.
func lookupBinary(o options) (string, error) {
	if p := o.getenv("REDIS_SERVER_BIN"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("redistest: REDIS_SERVER_BIN=%q is not an executable file", p)
		}
		return p, nil
	}
	if p, err := o.lookPath("redis-server"); err == nil {
		return p, nil
	}
	if isExecutable(o.fallback) {
		return o.fallback, nil
	}
	return "", notFoundError(fmt.Sprintf(`redistest: REDIS-SERVER NOT FOUND: apt-get install -y redis-server, or set REDIS_URL.
This test needs a real Redis server and is not skipped without one. Looked for
$REDIS_SERVER_BIN, redis-server on PATH, and %s. Fix it with one of:
    apt-get install -y redis-server                  (Debian/Ubuntu; .ci/run does this)
    REDIS_URL=redis://HOST:PORT/0 go test ./...      (use a running server)
    REDIS_SERVER_BIN=/path/to/redis-server go test ./...`, o.fallback))
}

// notFoundError is the missing binary's message: several lines saying what
// to do.
type notFoundError string

func (e notFoundError) Error() string { return string(e) }

// requirePass returns the value of the last --requirepass in args.
func requirePass(args []string) (string, bool) {
	pw, ok := "", false
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			pw, ok = args[i+1], true
		}
	}
	return pw, ok && pw != ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// freePort asks the kernel for a free port on 127.0.0.1. The port is free
// when freePort returns, not necessarily when redis-server binds it; Start
// retries when it is not.
func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
