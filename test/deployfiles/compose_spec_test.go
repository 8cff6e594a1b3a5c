package deployfiles

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// TestComposeSpec loads docker-compose.yml the way `docker compose
// config` does — compose-go, with the Compose Specification's schema,
// interpolation and its own consistency checks — so the file stays one
// Docker Compose accepts on a machine without Docker. The other compose
// tests check what the file says; this one that Compose can read it.
func TestComposeSpec(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root(t), composeFile)},
		cli.WithName("spillway"), cli.WithInterpolation(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker compose would refuse %s: %v", composeFile, err)
	}
	for _, name := range composeServices {
		if _, err := p.GetService(name); err != nil {
			t.Errorf("compose-go does not see service %s: %v", name, err)
		}
	}
}
