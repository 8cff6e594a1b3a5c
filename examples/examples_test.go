// Package examples_test runs every example of examples/ against a real
// Spillway: an admitter in this process with its embedded NATS server and
// JetStream, the memory store and the queues' workers (admitterd in dev
// mode), serving HTTP and NATS on loopback ports of its own. Each example
// runs as its users run it — a shell script, tsx, a Go program — and the
// test checks what happened to the jobs, not only what was printed.
package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/testkit/proc"
)

func TestMain(m *testing.M) {
	// The tests mostly wait for the programs they run, so all of them run
	// at once rather than GOMAXPROCS at a time, unless -parallel says.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "8")
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		// nats-server: a stream's file store opened by a request racing
		// the embedded server's shutdown can outlive it (test/e2e says more).
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}

// queuesYAML are the queues every example talks to:
//
//   - email: one job a second per X-Client-Id, one more may wait its turn
//     (so a quick third is rejected for about a second); its worker logs
//     each job, so a job ends succeeded.
//   - reports: one job a minute per X-Client-Id, one more may wait; no
//     handler (admit-only), so a queued job stays queued — there to be
//     cancelled — and a rejection says to come back in about a minute.
const queuesYAML = `
  - name: email
    limits: [{key: "header:X-Client-Id", algorithm: leaky_bucket, rate: 1/s, burst: 1}]
    backlog: {capacity: 100, leak_rate: 50/s}
    handler: {log: true}
  - name: reports
    limits: [{key: "header:X-Client-Id", algorithm: leaky_bucket, rate: 1/m, burst: 1}]
    backlog: {capacity: 100, leak_rate: 1/s}
`

// spillway is a running admitter with its workers.
type spillway struct {
	http   string // http://127.0.0.1:PORT
	nats   string // nats://127.0.0.1:PORT
	client *http.Client
}

// startSpillway starts an admitter in dev mode with the queues of
// queuesYAML and extra (more queue entries, indented as they are).
func startSpillway(t *testing.T, extra string) *spillway {
	t.Helper()
	cfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 4, grace_period: 2s}
queues:`, t.TempDir())+queuesYAML+extra)
	svc, err := admitterd.Start(t.Context(), admitterd.Options{Config: cfg, Dev: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("starting the admitter: %v", err)
	}
	s := &spillway{http: "http://" + svc.HTTPAddr(), nats: svc.NATSURL(), client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("shutting the admitter down: %v", err)
		}
	})
	return s
}

// state is a job's state as GET /v1/jobs/{id} says ("" when unknown).
func (s *spillway) state(t *testing.T, id string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.http+"/v1/jobs/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rec struct{ State string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&rec) != nil {
		return ""
	}
	return rec.State
}

// waitState waits for job id to be in state want.
func (s *spillway) waitState(t *testing.T, id, want string) {
	t.Helper()
	waitFor(t, 30*time.Second, "job "+id+" to be "+want, func() bool { return s.state(t, id) == want })
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

// result is how a command ended.
type result struct {
	out  string // stdout and stderr, interleaved
	code int
}

// run runs name with args in dir with env added, for at most 2 minutes.
func run(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	proc.SetParentDeathSignal(cmd)
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return result{out.String(), exit.ExitCode()}
	case err != nil:
		t.Fatalf("running %s %q: %v\n%s", name, args, err, out.String())
	}
	return result{out.String(), 0}
}

// must fails the test unless r exited with code and its output holds
// every one of want.
func must(t *testing.T, what string, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d; output:\n%s", what, r.code, code, r.out)
	}
	for _, w := range want {
		if !strings.Contains(r.out, w) {
			t.Fatalf("%s: output lacks %q:\n%s", what, w, r.out)
		}
	}
}

var (
	idInText = regexp.MustCompile(`\bid=(\S+)`)
	idInJSON = regexp.MustCompile(`"id":"([^"]+)"`)
)

// ids are the job ids in out, in order.
func ids(out string, re *regexp.Regexp) []string {
	var all []string
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		all = append(all, m[1])
	}
	return all
}

// TestCurlScripts runs examples/cli's curl scripts: a submission admitted
// and then done, one queued, one rejected with Retry-After, a repeat of
// an idempotency key, a job's status and a cancel.
func TestCurlScripts(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not on PATH: scripts/deps installs it (Debian package curl)")
	}
	s := startSpillway(t, "")
	env := []string{"SPILLWAY_URL=" + s.http}
	dir := "cli"

	r := run(t, dir, env, "./submit.sh", "email", "hello", "X-Client-Id: curl")
	must(t, "submit.sh email", r, 0, "http 202", "spillway-status: admitted", `"status":"admitted"`)
	done := ids(r.out, idInJSON)[0]
	s.waitState(t, done, "succeeded")
	r = run(t, dir, env, "./status.sh", done)
	must(t, "status.sh of a job done", r, 0, `"state":"succeeded"`)

	ikey := []string{"SPILLWAY_URL=" + s.http, "IDEMPOTENCY_KEY=report-1"}
	r = run(t, dir, ikey, "./submit.sh", "reports", "r1", "X-Client-Id: curl")
	must(t, "submit.sh reports (first)", r, 0, "http 202", `"status":"admitted"`)
	first := ids(r.out, idInJSON)[0]
	r = run(t, dir, env, "./submit.sh", "reports", "r2", "X-Client-Id: curl")
	must(t, "submit.sh reports (second)", r, 0, "http 202", "spillway-status: queued", `"status":"queued"`)
	queued := ids(r.out, idInJSON)[0]
	r = run(t, dir, env, "./submit.sh", "reports", "r3", "X-Client-Id: curl")
	must(t, "submit.sh reports (third)", r, 3, "http 429", "spillway-status: rejected", "rate-limited")
	if !regexp.MustCompile(`retry-after: [1-9][0-9]*\b`).MatchString(r.out) {
		t.Errorf("a rejection without Retry-After:\n%s", r.out)
	}
	r = run(t, dir, ikey, "./submit.sh", "reports", "r1", "X-Client-Id: curl")
	must(t, "submit.sh with the first one's idempotency key", r, 0, "http 202", `"duplicate":true`, `"id":"`+first+`"`)

	r = run(t, dir, env, "./status.sh", queued)
	must(t, "status.sh of a queued job", r, 0, `"state":"queued"`)
	r = run(t, dir, env, "./cancel.sh", queued)
	must(t, "cancel.sh of a queued job", r, 0, "cancelled")
	if got := s.state(t, queued); got != "cancelled" {
		t.Errorf("after cancel.sh the job is %q, want cancelled", got)
	}
	r = run(t, dir, env, "./cancel.sh", queued)
	must(t, "cancel.sh again", r, 22, "conflict") // curl --fail-with-body exits 22 on 4xx
	r = run(t, dir, env, "./status.sh", "0190f0c4-0000-7000-8000-000000000000")
	must(t, "status.sh of an unknown job", r, 22, "not-found")
}

// natsCLI is how to run the nats CLI, or "" with why not.
//
// The test runs nats-submit.sh with the nats CLI it finds: $NATS (a
// command, possibly with arguments), bin/nats (`make natscli` builds it,
// pinned), or nats on PATH. Building it here is too slow for every run:
// natscli v0.5.0 took 8m20s the first time on the loaded 2-core machine
// (2m40s of CPU, about 70 modules), far over what a default test may
// spend; with SPILLWAY_EXAMPLES_NATSCLI=build the test builds it with
// `go run` (cached in the Go build cache afterwards: ~3 s).
func natsCLI(t *testing.T) (string, string) {
	t.Helper()
	if c := os.Getenv("NATS"); c != "" {
		return c, ""
	}
	if bin, err := filepath.Abs(filepath.Join("..", "bin", "nats")); err == nil {
		if _, err := os.Stat(bin); err == nil {
			return bin, ""
		}
	}
	if bin, err := exec.LookPath("nats"); err == nil {
		return bin, ""
	}
	if os.Getenv("SPILLWAY_EXAMPLES_NATSCLI") == "build" {
		return "go run " + natsCLIModule, ""
	}
	return "", "no nats CLI: `make natscli` builds the pinned one into bin/ (minutes the first time), or set NATS, or SPILLWAY_EXAMPLES_NATSCLI=build"
}

// natsCLIModule is the nats CLI the Makefile's natscli target pins.
const natsCLIModule = "github.com/nats-io/natscli/nats@v0.5.0"

// TestNATSCLIScript runs examples/cli/nats-submit.sh: a job admitted
// through the NATS door and done, then the same idempotency key again.
func TestNATSCLIScript(t *testing.T) {
	t.Parallel()
	cli, why := natsCLI(t)
	if cli == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI runs every example: %s", why)
		}
		t.Skip(why)
	}
	s := startSpillway(t, "")
	env := []string{"NATS=" + cli, "NATS_URL=" + s.nats, "IDEMPOTENCY_KEY=nats-cli-1"}
	r := run(t, "cli", env, "./nats-submit.sh", "email", "over nats", "X-Client-Id:nats-cli")
	must(t, "nats-submit.sh", r, 0, `"status":"admitted"`)
	id := ids(r.out, idInJSON)[0]
	s.waitState(t, id, "succeeded")
	r = run(t, "cli", env, "./nats-submit.sh", "email", "over nats", "X-Client-Id:nats-cli")
	must(t, "nats-submit.sh with the same idempotency key", r, 0, `"duplicate":true`, `"id":"`+id+`"`)
}

// TestTSNATSProducer runs examples/ts-nats-producer with tsx: three jobs in
// a row (admitted, queued, then rejected and taken after its
// Retry-After), the same three again (duplicates, nothing new), and a
// rejection it gives up on.
func TestTSNATSProducer(t *testing.T) {
	t.Parallel()
	script := tsProducer(t)
	s := startSpillway(t, "")
	// As `npm run submit --` runs it: node loads tsx, which strips the
	// types (one process; the tsx command would start two).
	submit := func(args ...string) result {
		return run(t, filepath.Dir(script), nil, "node", append([]string{"--import", "tsx", script, "--server", s.nats}, args...)...)
	}

	r := submit("--queue", "email", "--header", "X-Client-Id=ts", "--data", "hello", "--count", "3", "--idempotency-key", "ts-1")
	must(t, "three jobs", r, 0, "admitted id=", "queued id=", "rate-limited: retrying in")
	first := ids(r.out, idInText)
	if len(first) != 3 {
		t.Fatalf("three jobs: %d ids, want 3:\n%s", len(first), r.out)
	}
	for _, id := range first {
		s.waitState(t, id, "succeeded")
	}

	r = submit("--queue", "email", "--header", "X-Client-Id=ts", "--data", "hello", "--count", "3", "--idempotency-key", "ts-1")
	must(t, "the same three jobs again", r, 0)
	if again := ids(r.out, idInText); strings.Count(r.out, "duplicate=true") != 3 || strings.Join(again, " ") != strings.Join(first, " ") {
		t.Fatalf("the same idempotency keys again: ids %v, want %v, each a duplicate:\n%s", again, first, r.out)
	}

	r = submit("--queue", "reports", "--header", "X-Client-Id=ts", "--count", "3", "--max-wait-ms", "5000")
	must(t, "a rejection to give up on", r, 3, "admitted id=", "queued id=", "rejected type=https://spillway.dev/problems/rate-limited retry_after_ms=", "after 1 tries")
}

// tsProducer installs the TypeScript producer's packages (npm ci, from its
// package-lock.json) into a cache directory kept between runs, keyed by
// the lock file, and returns a copy of the script beside them. Without
// node or npm the test is skipped, except in CI, which has them.
func tsProducer(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not on PATH; CI must have Node.js 18 or later and npm", tool)
			}
			t.Skipf("%s is not on PATH: the TypeScript producer needs Node.js 18 or later and npm", tool)
		}
	}
	src := "ts-nats-producer"
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json", ".npmrc"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "spillway-examples", "ts-nats-producer-"+hex.EncodeToString(h.Sum(nil))[:16])
	npmCI(t, src, dir)

	// The script beside node_modules, so that its imports resolve there.
	work := t.TempDir()
	b, err := os.ReadFile(filepath.Join(src, "submit.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "submit.ts"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"type": "module"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(work, "submit.ts")
}

// npmCI runs npm ci for the package in src in dir, unless an earlier run
// completed it; a lock file keeps two test processes from installing at
// once.
func npmCI(t *testing.T, src, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	complete := filepath.Join(dir, ".complete")
	if _, err := os.Stat(complete); err == nil {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json", ".npmrc"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	r := run(t, dir, nil, "npm", "ci", "--no-audit", "--no-fund")
	if r.code != 0 {
		t.Fatalf("npm ci in %s: exit %d\n%s", dir, r.code, r.out)
	}
	t.Logf("npm ci of the TypeScript producer: %v (kept in %s)", time.Since(began).Round(100*time.Millisecond), dir)
	if err := os.WriteFile(complete, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// process is a program of examples/ running in the background, its output
// kept line by line.
type process struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// startProcess runs bin with args until the test ends.
func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	proc.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %q printed:\n%s", filepath.Base(bin), args, p.output())
		}
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits for a line matching re and returns its submatches.
func (p *process) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	waitFor(t, 60*time.Second, "a line matching "+re.String(), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines {
			if m = re.FindStringSubmatch(l); m != nil {
				return true
			}
		}
		select {
		case <-p.done:
			t.Fatalf("exited before printing a line matching %s:\n%s", re, strings.Join(p.lines, "\n"))
		default:
		}
		return false
	})
	return m
}

// goBuild builds the Go program of examples/dir and returns its path.
func goBuild(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	if r := run(t, ".", nil, "go", "build", "-o", bin, "./"+dir); r.code != 0 {
		t.Fatalf("go build ./examples/%s: exit %d\n%s", dir, r.code, r.out)
	}
	return bin
}

// TestGoWorkerHandler runs examples/go-worker-handler as the handler of
// two queues, over HTTP and over NATS: Spillway's worker delivers each job
// with its payload and headers, the handler pushes back when it is at
// capacity, every job ends succeeded but the one it refuses for good,
// which is dead.
func TestGoWorkerHandler(t *testing.T) {
	t.Parallel()
	bin := goBuild(t, "go-worker-handler")
	// One job at a time, each taking 1s: the second of two jobs sent
	// together is pushed back (429, Retry-After: 1) and done after.
	web := startProcess(t, bin, "-listen", "127.0.0.1:0", "-capacity", "1", "-work", "1s")
	url := web.waitLine(t, regexp.MustCompile(`^go-worker-handler: (http://\S+/jobs)$`))[1]
	s := startSpillway(t, fmt.Sprintf(`
  - name: hooks
    limits: [{key: "header:X-Client-Id", algorithm: token_bucket, rate: 100/s, burst: 100}]
    backlog: {capacity: 100, leak_rate: 100/s}
    retry: {initial: 100ms, max: 5s}
    handler: {http: {url: %q}}
  - name: natsjobs
    limits: [{key: "header:X-Client-Id", algorithm: token_bucket, rate: 100/s, burst: 100}]
    backlog: {capacity: 100, leak_rate: 100/s}
    retry: {initial: 100ms, max: 5s}
    handler: {nats: {subject: examples.jobs, timeout: 5s}}
`, url))
	bus := startProcess(t, bin, "-listen", "", "-nats", s.nats, "-subject", "examples.jobs")
	bus.waitLine(t, regexp.MustCompile(`^go-worker-handler: nats examples.jobs`))

	post := func(q, payload string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.http+"/v1/queues/"+q+"/jobs", strings.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Client-Id", "team-a")
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var rep struct{ ID, Status string }
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &rep) != nil || rep.Status != "admitted" {
			t.Fatalf("submitting to %s: %d %s", q, resp.StatusCode, b)
		}
		return rep.ID
	}
	a, b := post("hooks", "first"), post("hooks", "second")
	n := post("natsjobs", "by nats")
	// A job the handler can never do goes to the dead-letter stream at
	// once: 422 over HTTP, Spillway-Status: permanent over NATS.
	pa, pn := post("hooks", "poison"), post("natsjobs", "poison")
	for _, id := range []string{a, b, n} {
		s.waitState(t, id, "succeeded")
	}
	for _, id := range []string{pa, pn} {
		s.waitState(t, id, "dead")
	}
	// Which of the two hooks jobs was pushed back is the worker's to say.
	for p, want := range map[*process][]string{
		web: {`permanent job=` + pa + ` attempt=1`, `done job=` + a + ` queue=hooks attempt=\d+ key=team-a payload="first"`, `done job=` + b + ` queue=hooks attempt=\d+ key=team-a payload="second"`, `busy job=(` + a + `|` + b + `) attempt=1`},
		bus: {`permanent job=` + pn + ` attempt=1`, `done job=` + n + ` queue=natsjobs attempt=1 key=team-a payload="by nats"`},
	} {
		out := p.output()
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^` + w).MatchString(out) {
				t.Errorf("the handler's output has no line matching %s:\n%s", w, out)
			}
		}
	}
}

// goPrograms are the Go programs of examples/ that submit jobs and exit:
// each row is `go run ./examples/<dir> <args>`, with {nats} and {http} in
// args replaced by the admitter's addresses, and the substrings its output
// must hold. Adding an example is adding a row.
var goPrograms = []struct {
	dir  string
	args []string
	want []string
}{
	{"go-nats-producer", []string{"-nats", "{nats}", "-queue", "email", "-key", "go-nats", "-data", "hello", "-wait"}, []string{"admitted", "succeeded"}},
	{"go-http-producer", []string{"-url", "{http}", "-queue", "email", "-key", "go-http", "-data", "hello", "-wait"}, []string{"admitted", "succeeded"}},
}

// TestGoPrograms runs each row of goPrograms against one admitter.
func TestGoPrograms(t *testing.T) {
	t.Parallel()
	s := startSpillway(t, "")
	for _, p := range goPrograms {
		t.Run(p.dir, func(t *testing.T) {
			args := []string{"run", "./" + p.dir}
			for _, a := range p.args {
				args = append(args, strings.NewReplacer("{nats}", s.nats, "{http}", s.http).Replace(a))
			}
			must(t, "go "+strings.Join(args, " "), run(t, ".", nil, "go", args...), 0, p.want...)
		})
	}
}
