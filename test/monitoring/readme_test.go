package monitoring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunbooks checks README.md has a runbook heading for every alert,
// the anchor of its runbook_url, and mentions every panel.
func TestRunbooks(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Operating Spillway\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Operating Spillway" section`)
	}
	section := readme[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var rules ruleFile
	readYAML(t, alertsYML, &rules)
	for _, r := range rules.alerts() {
		if !strings.Contains(section, "\n#### "+r.Alert+"\n") {
			t.Errorf("README.md, Operating Spillway: no runbook heading #### %s", r.Alert)
		}
	}
	for _, p := range readDashboard(t).allPanels() {
		if p.Type != "row" && !strings.Contains(section, p.Title) {
			t.Errorf("README.md, Operating Spillway: panel %q is not described", p.Title)
		}
	}
}
