package devscripts

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citation matches a reference to a document or tracker that a reader of
// the repository cannot open: the sections of the product contract kept
// outside the repository (its file name, or its name with a section sign)
// and issue or item numbers. docs/design.md is the repository's own
// contract; code, docs and tests point there instead.
var citation = regexp.MustCompile(`DESIGN ?§|DESIGN\.md|\b[Ii]ssues? #?[0-9]+|\b[Ii]tems? [0-9]+[a-z]?\b`)

// TestNoCitationsOfUnseenDocuments reads every tracked file but the
// changelog (a record of history) and fails on each line that cites one.
func TestNoCitationsOfUnseenDocuments(t *testing.T) {
	top := root(t)
	out, err := exec.CommandContext(t.Context(), "git", "-C", top, "ls-files").Output()
	if err != nil {
		t.Fatalf("listing the repository's files with git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 50 {
		t.Fatalf("git ls-files listed %d files; expected the whole repository", len(files))
	}
	var found int
	for _, name := range files {
		if name == "CHANGELOG.md" || strings.HasPrefix(name, "test/devscripts/citations_test.go") ||
			strings.Contains(name, "/testdata/") {
			continue
		}
		f, err := os.Open(filepath.Join(top, name))
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for n := 1; sc.Scan(); n++ {
			if m := citation.FindString(sc.Text()); m != "" {
				found++
				t.Errorf("%s:%d cites %q, which a reader of the repository cannot open; point to docs/design.md or say what is meant", name, n, m)
			}
		}
		_ = f.Close()
	}
	t.Logf("%d files read, %d citations", len(files), found)
}
