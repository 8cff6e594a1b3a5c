package deployfiles

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/config"
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

// repoFile is the absolute path of rel (slash-separated, from the root).
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(root(t), filepath.FromSlash(rel))
}

// readRepoFile reads rel, failing the test with a clear message when the
// file is not there (yet).
func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(repoFile(t, rel))
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s does not exist; the deployment files refer to it", rel)
	}
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return data
}

// decodeYAML decodes rel into v, naming the file in a failure.
func decodeYAML(t *testing.T, rel string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readRepoFile(t, rel), v); err != nil {
		t.Fatalf("%s: not valid YAML: %v", rel, err)
	}
}

// decodeDocs decodes every document of a multi-document YAML file.
func decodeDocs(rel string, data []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for i := 0; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", rel, i+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// loadConfig loads a Spillway configuration with the given environment.
func loadConfig(t *testing.T, where, path string, env map[string]string) *config.Config {
	t.Helper()
	c, err := config.Load(path, func(k string) string { return env[k] }, config.Overrides{})
	if err != nil {
		t.Fatalf("%s: does not load with internal/config: %v", where, err)
	}
	return c
}

// listenPort is the port of a listen address such as ":8080".
func listenPort(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: listen address %q: %v", where, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 {
		t.Fatalf("%s: listen address %q: want a fixed port, got %q", where, addr, p)
	}
	return n
}

// flagValue returns the value of --name (or -name) in args, as "--name v"
// or "--name=v".
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		trimmed := strings.TrimLeft(a, "-")
		if trimmed == a {
			continue
		}
		if trimmed == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(trimmed, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Paths the code serves, by process; TestServedPaths checks them against
// running binaries, the other tests check the files against them.
var (
	admitterProbePaths = []string{"/livez", "/readyz", "/metrics"}
	workerProbePaths   = []string{"/livez", "/readyz", "/metrics"}
)

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Generic accessors over decoded YAML.

func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func getString(v any, keys ...string) string {
	s, _ := get(v, keys...).(string)
	return s
}

func getMap(v any, keys ...string) map[string]any {
	m, _ := get(v, keys...).(map[string]any)
	return m
}

func getList(v any, keys ...string) []any {
	l, _ := get(v, keys...).([]any)
	return l
}

func getInt(v any, keys ...string) (int, bool) {
	n, ok := get(v, keys...).(int)
	return n, ok
}

func stringsOf(l []any) []string {
	out := make([]string, 0, len(l))
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return out
}
