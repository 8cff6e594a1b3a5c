package deployfiles

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
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

	"github.com/spillway-dev/spillway/internal/testkit/logtest"
)

const dockerfile = "Dockerfile"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	var (
		out     []instruction
		pending strings.Builder
		start   int
	)
	for i, raw := range strings.Split(string(readRepoFile(t, dockerfile)), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if pending.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending.WriteString(cont + " ")
			continue
		}
		pending.WriteString(line)
		cmd, args, _ := strings.Cut(pending.String(), " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		pending.Reset()
	}
	if pending.Len() > 0 {
		t.Fatalf("%s:%d: a continuation line ends the file", dockerfile, start)
	}
	return out
}

// shellWords splits a RUN line as sh would for plain words and quotes.
func shellWords(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		inTok bool
		quote rune
	)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inTok = r, true
		case r == ' ' || r == '\t':
			if inTok {
				out = append(out, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteRune(r)
			inTok = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inTok {
		out = append(out, cur.String())
	}
	return out, nil
}

// goBuild is the Dockerfile's go build: its environment, flags (before
// -o) and packages.
type goBuild struct {
	line     int
	env      []string
	flags    []string
	packages []string
}

func dockerGoBuild(t *testing.T, ins []instruction) goBuild {
	t.Helper()
	for _, in := range ins {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		words, err := shellWords(in.args)
		if err != nil {
			t.Fatalf("%s:%d: RUN: %v", dockerfile, in.line, err)
		}
		b := goBuild{line: in.line}
		i := 0
		for ; i < len(words) && words[i] != "go"; i++ {
			w := words[i]
			if strings.HasPrefix(w, "--mount") {
				continue
			}
			if k, _, ok := strings.Cut(w, "="); ok && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(k) {
				b.env = append(b.env, w)
				continue
			}
			t.Fatalf("%s:%d: RUN: unexpected %q before go build", dockerfile, in.line, w)
		}
		if i+1 >= len(words) || words[i+1] != "build" {
			t.Fatalf("%s:%d: RUN: want [ENV=V ...] go build FLAGS -o DIR/ PACKAGES", dockerfile, in.line)
		}
		rest := words[i+2:]
		o := -1
		for j, w := range rest {
			if w == "-o" {
				o = j
				break
			}
		}
		if o < 0 || o+2 > len(rest) {
			t.Fatalf("%s:%d: RUN go build: want -o DIR/ followed by the packages", dockerfile, in.line)
		}
		b.flags = rest[:o]
		b.packages = rest[o+2:]
		return b
	}
	t.Fatalf("%s: no RUN line with go build", dockerfile)
	return goBuild{}
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t)
	goMod := string(readRepoFile(t, "go.mod"))
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(goMod)
	if m == nil {
		t.Fatalf("go.mod: no go line")
	}
	goVersion := m[1]

	var froms []instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			froms = append(froms, in)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("%s: %d FROM lines; want a multi-stage build (a golang builder, a minimal final stage)", dockerfile, len(froms))
	}
	imageOf := func(in instruction) string {
		for _, w := range strings.Fields(in.args) {
			if !strings.HasPrefix(w, "--") {
				return w
			}
		}
		return ""
	}
	builder := imageOf(froms[0])
	tag, ok := strings.CutPrefix(builder, "golang:")
	if !ok {
		t.Errorf("%s:%d: builder image %q: want golang:<go.mod's version>", dockerfile, froms[0].line, builder)
	} else if v, _, _ := strings.Cut(tag, "-"); v != goVersion {
		t.Errorf("%s:%d: builder image %q has Go %s, go.mod says go %s", dockerfile, froms[0].line, builder, v, goVersion)
	}

	final := froms[len(froms)-1]
	finalImage := imageOf(final)
	if !strings.HasPrefix(finalImage, "gcr.io/distroless/static") && finalImage != "scratch" {
		t.Errorf("%s:%d: final image %q: want gcr.io/distroless/static-* or scratch", dockerfile, final.line, finalImage)
	}
	var finalStage []instruction
	for _, in := range ins {
		if in.line > final.line {
			finalStage = append(finalStage, in)
		}
	}
	user, exposed, labels, copied := "", map[string]bool{}, "", map[string]bool{}
	for _, in := range finalStage {
		switch in.cmd {
		case "USER":
			user = in.args
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				exposed[strings.TrimSuffix(p, "/tcp")] = true
			}
		case "LABEL":
			labels += in.args + " "
		case "COPY":
			w := strings.Fields(in.args)
			if len(w) > 2 && strings.HasPrefix(w[0], "--from=") && w[len(w)-1] == "/usr/local/bin/" {
				for _, src := range w[1 : len(w)-1] {
					copied[filepath.Base(src)] = true
				}
			}
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("%s: final stage USER %q: want a non-root user (65532, distroless' nonroot)", dockerfile, user)
	}
	for _, p := range []string{"8080", "9090"} {
		if !exposed[p] {
			t.Errorf("%s: final stage: EXPOSE %s is missing (the admitter's http.listen, the worker's --metrics-listen)", dockerfile, p)
		}
	}
	for _, l := range []string{"org.opencontainers.image.source", "org.opencontainers.image.title", "org.opencontainers.image.description"} {
		if !strings.Contains(labels, l+"=") {
			t.Errorf("%s: final stage: LABEL %s is missing", dockerfile, l)
		}
	}
	// compose health checks and the Kubernetes commands run these paths.
	for _, bin := range []string{"admitter", "worker", "spillctl"} {
		if !copied[bin] {
			t.Errorf("%s: final stage: %s is not copied to /usr/local/bin/", dockerfile, bin)
		}
	}

	b := dockerGoBuild(t, ins)
	for _, want := range []string{"CGO_ENABLED=0"} {
		if !contains(b.env, want) {
			t.Errorf("%s:%d: go build without %s: the binary would not be static", dockerfile, b.line, want)
		}
	}
	for _, want := range []string{"-trimpath", "-ldflags"} {
		if !contains(b.flags, want) {
			t.Errorf("%s:%d: go build without %s", dockerfile, b.line, want)
		}
	}
	for _, pkg := range []string{"./cmd/admitter", "./cmd/worker", "./cmd/spillctl"} {
		if !contains(b.packages, pkg) {
			t.Errorf("%s:%d: go build does not build %s", dockerfile, b.line, pkg)
		}
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	errBuild  error
)

// binaries builds the Dockerfile's binaries once per test process, with the
// Dockerfile's own environment and flags (cross-compilation variables,
// whose values are build arguments, are left to the host).
func binaries(t *testing.T) string {
	t.Helper()
	b := dockerGoBuild(t, parseDockerfile(t))
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spillway-deployfiles-")
		if err != nil {
			errBuild = err
			return
		}
		buildDir = dir
		args := append([]string{"build"}, b.flags...)
		args = append(args, "-o", dir+string(filepath.Separator))
		args = append(args, b.packages...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root(t)
		cmd.Env = os.Environ()
		for _, kv := range b.env {
			if !strings.Contains(kv, "$") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			errBuild = fmt.Errorf("go %s (from %s:%d): %w\n%s", strings.Join(args, " "), dockerfile, b.line, err, out)
		}
	})
	if errBuild != nil {
		t.Fatal(errBuild)
	}
	return buildDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func TestBinariesAreStaticAndRun(t *testing.T) {
	dir := binaries(t)
	for _, name := range []string{"admitter", "worker", "spillctl"} {
		bin := filepath.Join(dir, name)
		f, err := elf.Open(bin)
		if err != nil {
			t.Errorf("%s (built as %s builds it): not an ELF binary: %v", name, dockerfile, err)
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: has a PT_INTERP program header: it needs a dynamic loader, which distroless/static lacks", name)
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: reading DT_NEEDED: %v", name, err)
		}
		if len(libs) > 0 {
			t.Errorf("%s: needs shared libraries %v (DT_NEEDED); want none", name, libs)
		}
		if f.Section(".symtab") != nil {
			t.Errorf("%s: has a symbol table; -ldflags \"-s -w\" should strip it", name)
		}
		_ = f.Close()

		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), bin, "--help")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("%s --help: %v\nstdout: %s\nstderr: %s", name, err, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stdout.String()+stderr.String(), name) {
			t.Errorf("%s --help: the usage does not name the command:\n%s", name, stdout.String())
		}
	}
}

// process is a running binary whose first matching stdout line was read.
type process struct {
	cmd  *exec.Cmd
	line string
}

// start runs bin with args and waits for a stdout line matching re.
func start(t *testing.T, bin string, re *regexp.Regexp, args ...string) (*process, []string) {
	t.Helper()
	// The test's context ends before its cleanups run: the process then
	// gets SIGTERM, as from Docker or Kubernetes, and SIGKILL 20 s later.
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	var stderr logtest.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	done := make(chan struct{})
	var waitErr error // read after done is closed
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		// Wait reports the cancellation itself; the exit status tells
		// whether the process stopped cleanly.
		<-done
		if ps := cmd.ProcessState; ps != nil && !ps.Success() {
			t.Logf("%s after SIGTERM: %v\nstderr:\n%s", filepath.Base(bin), ps, stderr.String())
		}
	})
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case m := <-found:
		return &process{cmd: cmd, line: m[0]}, m
	case <-done:
		t.Fatalf("%s %s exited before it printed its address: %v\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), waitErr, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s %s printed no line matching %s within a minute\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), re, stderr.String())
	}
	return nil, nil
}

// waitOK requests url until it answers 200, for up to a minute.
func waitOK(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Errorf("GET %s: no 200 within a minute; last answer: %s", url, last)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestServedPaths runs the binaries the Dockerfile builds, an admitter in
// dev mode (embedded JetStream) and a worker beside it, and requests every
// path the compose health checks and the Kubernetes probes use, and the
// compose health check command itself.
func TestServedPaths(t *testing.T) {
	dir := binaries(t)
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "spillway.yaml")
	conf := fmt.Sprintf(`nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: probe
    limits: [{key: global, rate: 10/s, burst: 10}]
    backlog: {capacity: 10, leak_rate: 10/s}
    handler: {log: true}
`, filepath.Join(tmp, "js"))
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	_, m := start(t, filepath.Join(dir, "admitter"),
		regexp.MustCompile(`^spillway admitter: http://(\S+)\s+nats (\S+)`), "--dev", "--config", cfg)
	admitterURL, natsURL := "http://"+m[1], m[2]
	_, w := start(t, filepath.Join(dir, "worker"),
		regexp.MustCompile(`^spillway worker: metrics on http://(\S+)/metrics`),
		"--config", cfg, "--nats-url", natsURL, "--metrics-listen", "127.0.0.1:0")
	workerURL := "http://" + w[1]

	for _, p := range admitterProbePaths {
		waitOK(t, admitterURL+p)
	}
	for _, p := range workerProbePaths {
		waitOK(t, workerURL+p)
	}
	// The compose health check: spillctl probe exits 0 on the admitter's
	// and the worker's /readyz.
	for _, u := range []string{admitterURL + "/readyz", workerURL + "/readyz"} {
		out, err := exec.CommandContext(t.Context(), filepath.Join(dir, "spillctl"), "probe", u).CombinedOutput()
		if err != nil {
			t.Errorf("spillctl probe %s: %v\n%s", u, err, out)
		}
	}
}

// TestDockerignore: the build context keeps what the build needs. Docker
// applies .dockerignore's patterns in order, the last match deciding; a
// leading ! keeps a path.
func TestDockerignore(t *testing.T) {
	const file = ".dockerignore"
	var patterns []string
	for _, l := range strings.Split(string(readRepoFile(t, file)), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(p string) bool {
		out := false
		for _, pat := range patterns {
			keep := strings.HasPrefix(pat, "!")
			pat = strings.TrimPrefix(pat, "!")
			for _, cand := range []string{p, strings.Split(p, "/")[0]} {
				if ok, _ := filepath.Match(strings.TrimPrefix(pat, "**/"), cand); ok {
					out = !keep
				}
			}
		}
		return out
	}
	need := []string{"go.mod", "go.sum", "cmd", "internal", "pkg"}
	for _, in := range parseDockerfile(t) {
		if in.cmd != "COPY" || strings.Contains(in.args, "--from=") {
			continue
		}
		w := strings.Fields(in.args)
		need = append(need, w[:len(w)-1]...)
	}
	for _, p := range need {
		if ignored(p) {
			t.Errorf("%s excludes %s, which %s needs in the build context", file, p, dockerfile)
		}
		if _, err := os.Stat(repoFile(t, p)); err != nil {
			t.Errorf("%s needs %s in the build context: %v", dockerfile, p, err)
		}
	}
	if !ignored(".git") {
		t.Errorf("%s: .git is sent with the build context; exclude it", file)
	}
}
