package client_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The weights calls against a real admitter: a rule set, read, listed and
// deleted; a bad weight is a problem naming the field; a submit key may
// not call them.
func TestWeightsCalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin"), []byte(adminKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := startAdmitter(dir, adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("stopping the admitter: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	checked := client.WithHTTPClient(apitest.Client(t, &http.Client{}))
	c := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey), checked))(t)
	admin := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(adminKey), checked))(t)

	if _, err := c.SetWeight(ctx, "limited", "vip", 3); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("SetWeight with a submit key: %v, want ErrForbidden", err)
	}
	if l := must(admin.Weights(ctx, "limited"))(t); l.Queue != "limited" || len(l.Rules) != 0 {
		t.Errorf("Weights: %+v, want none", l)
	}
	set := must(admin.SetWeight(ctx, "limited", "tenant-*", 3))(t)
	if set.Source != spillway.WeightSourceRuntime || set.Weight != 3 || set.Key != "tenant-*" {
		t.Errorf("SetWeight: %+v", set)
	}
	if k := must(admin.KeyWeight(ctx, "limited", "tenant-a"))(t); k.Weight != 3 || k.Pattern != "tenant-*" {
		t.Errorf("KeyWeight of tenant-a: %+v, want 3 from tenant-*", k)
	}
	if l := must(admin.Weights(ctx, "limited"))(t); len(l.Rules) != 1 || !l.Rules[0].InForce {
		t.Errorf("Weights: %+v, want tenant-* in force", l)
	}
	var p *client.ProblemError
	if _, err := admin.SetWeight(ctx, "limited", "vip", 0); !errors.As(err, &p) || p.Field != "weight" {
		t.Errorf("SetWeight 0: %v, want a problem naming weight", err)
	}
	if _, err := admin.KeyWeight(ctx, "nope", "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("KeyWeight of an unknown queue: %v, want ErrNotFound", err)
	}
	if err := admin.DeleteWeight(ctx, "limited", "tenant-*"); err != nil {
		t.Errorf("DeleteWeight: %v", err)
	}
	if err := admin.DeleteWeight(ctx, "limited", "tenant-*"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DeleteWeight of no rule: %v, want ErrNotFound", err)
	}
	if k := must(admin.KeyWeight(ctx, "limited", "tenant-a"))(t); k.Weight != 1 || k.Source != spillway.WeightSourceDefault {
		t.Errorf("KeyWeight after the delete: %+v, want the default 1", k)
	}
}
