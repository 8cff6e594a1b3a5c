package devscripts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// root is the repository's root directory.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find this test file's directory")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Every tool scripts/deps looks for, as the sandbox names them. "headers"
// is the C library's stdlib.h in the include directory.
var allTools = []string{"redis-server", "nats-server", "promtool", "prometheus", "chromium", "gcc", "headers", "make", "curl", "node", "npm"}

// sandbox is a directory in which scripts/deps runs with a PATH of stubs:
// bin is PATH, sys stands for /usr/bin and /usr/sbin (DEPS_SYSTEM_DIRS),
// include for /usr/include, policy for /usr/sbin/policy-rc.d. The stub
// apt-get, sudo and dpkg append one line per call to log; the stub
// apt-get install creates the packages' binaries in sys.
type sandbox struct {
	dir, bin, sys, include, policy, log string
	env                                 map[string]string
}

func newSandbox(t *testing.T, present ...string) *sandbox {
	t.Helper()
	dir := t.TempDir()
	s := &sandbox{
		dir:     dir,
		bin:     filepath.Join(dir, "bin"),
		sys:     filepath.Join(dir, "sys"),
		include: filepath.Join(dir, "include"),
		policy:  filepath.Join(dir, "policy-rc.d"),
		log:     filepath.Join(dir, "calls.log"),
	}
	for _, d := range []string{s.bin, s.sys, s.include} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The real programs the script and the stubs use; nothing else is on PATH.
	for _, name := range []string{"bash", "tee", "chmod", "rm", "true"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("the sandbox needs %s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(s.bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	bash := filepath.Join(s.bin, "bash")
	s.stub(t, "id", bash, `[ "$1" = -u ] && echo "$STUB_UID"`)
	s.stub(t, "dpkg", bash, `printf 'dpkg %s\n' "$*" >>"$STUB_LOG"`)
	s.stub(t, "apt-get", bash, `
printf 'apt-get %s\n' "$*" >>"$STUB_LOG"
if [ -x "$DEPS_POLICY_RC_D" ]; then
	"$DEPS_POLICY_RC_D"; printf 'policy-rc.d answers %s\n' "$?" >>"$STUB_LOG"
else
	printf 'policy-rc.d absent\n' >>"$STUB_LOG"
fi
[ "$1" = install ] || exit 0
[ -z "$STUB_INSTALL_NOTHING" ] || exit 0
mk() { printf '#!/bin/sh\n' >"$STUB_SYS/$1"; chmod 755 "$STUB_SYS/$1"; }
for pkg in "$@"; do
	case $pkg in
	-*|install) ;;
	prometheus) mk promtool; mk prometheus ;;
	nodejs) mk node ;;
	libc6-dev) printf '/* stub */\n' >"$DEPS_INCLUDE_DIR/stdlib.h" ;;
	*) mk "$pkg" ;;
	esac
done
[ -z "$STUB_INSTALL_FAILS" ] || exit 100`)
	s.env = map[string]string{
		"PATH":             s.bin,
		"HOME":             dir,
		"STUB_UID":         "0",
		"STUB_LOG":         s.log,
		"STUB_SYS":         s.sys,
		"DEPS_SYSTEM_DIRS": s.sys,
		"DEPS_POLICY_RC_D": s.policy,
		"DEPS_INCLUDE_DIR": s.include,
	}
	for _, tool := range present {
		s.add(t, tool)
	}
	return s
}

// stub writes an executable bash script named name into bin.
func (s *sandbox) stub(t *testing.T, name, bash, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.bin, name), []byte("#!"+bash+"\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// add makes a tool present: nats-server in sys (Debian's /usr/sbin, often
// not on a non-login PATH), the C headers in include, the rest on PATH.
func (s *sandbox) add(t *testing.T, tool string) {
	t.Helper()
	path := filepath.Join(s.bin, tool)
	switch tool {
	case "headers":
		path = filepath.Join(s.include, "stdlib.h")
	case "nats-server":
		path = filepath.Join(s.sys, tool)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// without is allTools minus the given ones.
func without(missing ...string) []string {
	var out []string
	for _, tool := range allTools {
		skip := false
		for _, m := range missing {
			skip = skip || tool == m
		}
		if !skip {
			out = append(out, tool)
		}
	}
	return out
}

// run runs scripts/deps in the sandbox and returns its exit code, its
// standard error and the stubs' calls, one per line.
func (s *sandbox) run(t *testing.T) (code int, stderr string, calls []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "bash"), filepath.Join(root(t), "scripts", "deps"))
	cmd.Dir = s.dir
	cmd.Env = nil
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("scripts/deps did not run: %v\n%s", err, errb.String())
	}
	if out.Len() > 0 {
		t.Logf("stdout:\n%s", out.String())
	}
	if errb.Len() > 0 {
		t.Logf("stderr:\n%s", errb.String())
	}
	if data, err := os.ReadFile(s.log); err == nil {
		calls = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return code, errb.String(), calls
}

// installCalls is what a root run that installs packages must call, in order:
// update and install, each while a policy-rc.d forbids starting services.
func installCalls(prefix, packages string) []string {
	return []string{
		prefix + "apt-get update -q", "policy-rc.d answers 101",
		prefix + "apt-get install -y -q --no-install-recommends " + packages, "policy-rc.d answers 101",
	}
}

func equalCalls(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestDepsNothingMissingDoesNothing(t *testing.T) {
	t.Parallel()
	for _, uid := range []string{"0", "1000"} {
		t.Run("uid "+uid, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t, allTools...)
			s.env["STUB_UID"] = uid
			code, stderr, calls := s.run(t)
			if code != 0 || stderr != "" {
				t.Errorf("exit %d, stderr %q; want 0 and silence", code, stderr)
			}
			equalCalls(t, calls, nil)
			if _, err := os.Stat(s.policy); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("policy-rc.d: %v; want none written", err)
			}
		})
	}
}

func TestDepsInstallsWhatIsMissingAsRoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		missing  []string
		packages string
	}{
		{"promtool", []string{"promtool"}, "prometheus"},
		{"prometheus", []string{"prometheus"}, "prometheus"},
		{"chromium", []string{"chromium"}, "chromium"},
		{"prometheus and chromium", []string{"promtool", "prometheus", "chromium"}, "prometheus chromium"},
		{"redis", []string{"redis-server"}, "redis-server"},
		{"nats", []string{"nats-server"}, "nats-server"},
		{"gcc", []string{"gcc"}, "gcc"},
		{"C headers", []string{"headers"}, "libc6-dev"},
		{"make", []string{"make"}, "make"},
		{"curl", []string{"curl"}, "curl"},
		{"Node.js", []string{"node", "npm"}, "nodejs npm"},
		{"npm", []string{"npm"}, "npm"},
		{"everything", allTools, "redis-server nats-server prometheus chromium gcc libc6-dev make curl nodejs npm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t, without(tc.missing...)...)
			code, stderr, calls := s.run(t)
			if code != 0 {
				t.Errorf("exit %d; want 0", code)
			}
			equalCalls(t, calls, installCalls("", tc.packages))
			if !strings.Contains(stderr, "scripts/deps: installed") {
				t.Errorf("stderr does not say it installed:\n%s", stderr)
			}
			if _, err := os.Stat(s.policy); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("policy-rc.d after the run: %v; want its own one removed", err)
			}
		})
	}
}

func TestDepsCountsAlternativesAndOverrides(t *testing.T) {
	t.Parallel()
	t.Run("chromium-browser", func(t *testing.T) {
		t.Parallel()
		s := newSandbox(t, without("chromium")...)
		s.add(t, "chromium-browser")
		if code, _, calls := s.run(t); code != 0 || len(calls) != 0 {
			t.Errorf("exit %d, calls %q; want 0 and none", code, calls)
		}
	})
	t.Run("test variables", func(t *testing.T) {
		t.Parallel()
		s := newSandbox(t, "gcc", "headers", "make", "curl", "node", "npm")
		other := filepath.Join(s.dir, "elsewhere")
		if err := os.Mkdir(other, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"REDIS_SERVER_BIN", "NATS_SERVER_BIN", "PROMTOOL", "PROMETHEUS", "SPILLWAY_CHROMIUM"} {
			p := filepath.Join(other, strings.ToLower(v))
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			s.env[v] = p
		}
		if code, _, calls := s.run(t); code != 0 || len(calls) != 0 {
			t.Errorf("exit %d, calls %q; want 0 and none", code, calls)
		}
	})
}

func TestDepsKeepsAnExistingPolicy(t *testing.T) {
	t.Parallel()
	s := newSandbox(t, without("chromium")...)
	site := "#!/bin/sh\n# the site's own\nexit 101\n"
	if err := os.WriteFile(s.policy, []byte(site), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, calls := s.run(t)
	if code != 0 {
		t.Errorf("exit %d; want 0", code)
	}
	equalCalls(t, calls, installCalls("", "chromium"))
	got, err := os.ReadFile(s.policy)
	if err != nil || string(got) != site {
		t.Errorf("policy-rc.d after the run: %q, %v; want the site's own kept", got, err)
	}
}

func TestDepsWithoutRootSaysWhatToRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, s *sandbox)
		calls []string
	}{
		{"no sudo", func(*testing.T, *sandbox) {}, nil},
		{"sudo wants a password", func(t *testing.T, s *sandbox) {
			s.stub(t, "sudo", filepath.Join(s.bin, "bash"), `printf 'sudo %s\n' "$*" >>"$STUB_LOG"; exit 1`)
		}, []string{"sudo -n true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t, without("promtool", "prometheus", "chromium")...)
			s.env["STUB_UID"] = "1000"
			tc.setup(t, s)
			code, stderr, calls := s.run(t)
			if code != 1 {
				t.Errorf("exit %d; want 1", code)
			}
			equalCalls(t, calls, tc.calls)
			for _, want := range []string{
				"missing: promtool and prometheus, chromium",
				"    sudo make deps\n",
				"    sudo apt-get update && sudo apt-get install -y --no-install-recommends prometheus chromium\n",
			} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

func TestDepsUsesSudoWhenItNeedsNoPassword(t *testing.T) {
	t.Parallel()
	s := newSandbox(t, without("chromium")...)
	s.env["STUB_UID"] = "1000"
	s.stub(t, "sudo", filepath.Join(s.bin, "bash"), `printf 'sudo %s\n' "$*" >>"$STUB_LOG"; [ "$1" = -n ] || exit 1; shift; exec "$@"`)
	code, _, calls := s.run(t)
	if code != 0 {
		t.Errorf("exit %d; want 0", code)
	}
	want := []string{
		"sudo -n true",
		"sudo -n tee " + s.policy,
		"sudo -n chmod 755 " + s.policy,
		"sudo -n apt-get update -q", "apt-get update -q", "policy-rc.d answers 101",
		"sudo -n apt-get install -y -q --no-install-recommends chromium",
		"apt-get install -y -q --no-install-recommends chromium", "policy-rc.d answers 101",
		"sudo -n rm -f " + s.policy,
	}
	equalCalls(t, calls, want)
}

func TestDepsInstallErrors(t *testing.T) {
	t.Parallel()
	t.Run("postinst fails, binaries there", func(t *testing.T) {
		t.Parallel()
		s := newSandbox(t, without("prometheus")...)
		s.env["STUB_INSTALL_FAILS"] = "1"
		code, _, calls := s.run(t)
		if code != 0 {
			t.Errorf("exit %d; want 0: the binaries are in place", code)
		}
		equalCalls(t, calls, append(installCalls("", "prometheus"), "dpkg --configure -a"))
	})
	t.Run("still missing", func(t *testing.T) {
		t.Parallel()
		s := newSandbox(t, without("prometheus")...)
		s.env["STUB_INSTALL_NOTHING"] = "1"
		code, stderr, calls := s.run(t)
		if code != 1 {
			t.Errorf("exit %d; want 1", code)
		}
		equalCalls(t, calls, installCalls("", "prometheus"))
		if want := "still missing after apt-get install: promtool and prometheus"; !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
		if _, err := os.Stat(s.policy); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("policy-rc.d after a failed run: %v; want its own one removed", err)
		}
	})
}

// The README's test command installs what it needs: `make test` runs
// `make deps`, which runs scripts/deps; .ci/run uses the same script and
// the same command, and has no install logic of its own.
func TestMakeTestRunsDeps(t *testing.T) {
	t.Parallel()
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	makefile := read("Makefile")
	if m := regexp.MustCompile(`(?m)^test:([^#\n]*)`).FindStringSubmatch(makefile); m == nil || !strings.Contains(" "+m[1]+" ", " deps ") {
		t.Errorf("Makefile: test does not depend on deps (prerequisites %q)", m)
	}
	if !regexp.MustCompile(`(?m)^deps:.*\n\tscripts/deps$`).MatchString(makefile) {
		t.Error("Makefile: deps does not run scripts/deps")
	}
	ci := read(".ci/run")
	if !regexp.MustCompile(`(?m)^scripts/deps$`).MatchString(ci) || !regexp.MustCompile(`(?m)^make test$`).MatchString(ci) {
		t.Error(".ci/run: does not run scripts/deps and then make test")
	}
	if strings.Contains(ci, "apt-get") || strings.Contains(ci, "policy-rc.d") {
		t.Error(".ci/run: installs packages itself; scripts/deps is the one place for that")
	}
	for _, doc := range []string{"README.md", "docs/development.md"} {
		if !strings.Contains(read(doc), "make deps") {
			t.Errorf("%s does not name make deps", doc)
		}
	}
	if info, err := os.Stat(filepath.Join(root(t), "scripts", "deps")); err != nil || info.Mode()&0o111 == 0 {
		t.Errorf("scripts/deps is not executable: %v", err)
	}
}
