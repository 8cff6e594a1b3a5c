package client_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// adminKey is the admin key of adminConfig's admitter.
const adminKey = "client-test-admin-key-0123456789"

// adminConfig is testConfig with admin keys.
var adminConfig = strings.Replace(testConfig, "api_keys_file: keys}", "api_keys_file: keys, admin_keys_file: admin}", 1)

// The HTTP API's reads and admin calls, against a real admitter: queues,
// a backlog's keys, pause and resume, a key's limit set, read and
// deleted; the admin calls refuse a submit key; a NATS client sends none
// of them.
func TestAdminCalls(t *testing.T) {
	t.Parallel()
	a := adminSetup(t, adminConfig)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	checked := client.WithHTTPClient(apitest.Client(t, &http.Client{}))
	c := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey), checked))(t)
	admin := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(adminKey), checked))(t)

	who := client.WithHeader("X-Client", "admin-test")
	for range 3 {
		must(c.Submit(ctx, "limited", nil, who))(t)
	}
	qs := must(c.Queues(ctx))(t)
	if len(qs) != 2 || qs[0].Name != "limited" || qs[1].Name != "work" {
		t.Errorf("Queues: %+v, want limited and work", qs)
	}
	admittest.WaitFor(t, 10*time.Second, "the backlog's two jobs", func() bool {
		q, err := c.Queue(ctx, "limited")
		return err == nil && q.Depth == 2
	})
	if _, err := c.Queue(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Queue of an unknown queue: %v, want ErrNotFound", err)
	}
	if _, err := c.Keys(ctx, "limited", 5); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("Keys with a submit key: %v, want ErrForbidden (every tenant's keys are an admin's)", err)
	}
	kl := must(admin.Keys(ctx, "limited", 5))(t)
	if kl.TotalKeys != 1 || len(kl.Keys) != 1 || kl.Keys[0].Depth != 2 {
		t.Errorf("Keys: %+v, want one key with 2 jobs", kl)
	}

	if _, err := c.Pause(ctx, "limited", "maintenance"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("Pause with a submit key: %v, want ErrForbidden", err)
	}
	p := must(admin.Pause(ctx, "limited", "maintenance"))(t)
	if !p.Paused || p.Queue != "limited" || p.Reason != "maintenance" || p.By == "" {
		t.Errorf("Pause: %+v", p)
	}
	if q := must(c.Queue(ctx, "limited"))(t); !q.Paused || q.PauseReason != "maintenance" {
		t.Errorf("the paused queue: %+v", q)
	}
	if r := must(admin.Resume(ctx, "limited"))(t); r.Paused {
		t.Errorf("Resume: %+v", r)
	}

	l := must(admin.Limits(ctx, "limited"))(t)
	if len(l.Tiers) != 1 || len(l.Tiers[0].Overrides) != 0 {
		t.Fatalf("Limits: %+v, want one tier without overrides", l)
	}
	tier := l.Tiers[0].Tier
	set := must(admin.SetKeyLimit(ctx, "limited", tier, "vip", spillway.LimitParams{Rate: "10/s", Burst: 5}))(t)
	if set.Source != spillway.LimitSourceRuntime || set.Rate != "10/s" || set.Burst != 5 {
		t.Errorf("SetKeyLimit: %+v", set)
	}
	// An override is in force on every admitter within a second: this
	// one's view of it too.
	admittest.WaitFor(t, 10*time.Second, "the override in force", func() bool {
		k, err := admin.KeyLimit(ctx, "limited", tier, "vip")
		return err == nil && k.Source == spillway.LimitSourceRuntime && k.Burst == 5
	})
	if err := admin.DeleteKeyLimit(ctx, "limited", tier, "vip"); err != nil {
		t.Errorf("DeleteKeyLimit: %v", err)
	}
	admittest.WaitFor(t, 10*time.Second, "the default limit again", func() bool {
		k, err := admin.KeyLimit(ctx, "limited", tier, "vip")
		return err == nil && k.Source == spillway.LimitSourceDefault
	})
	if err := admin.DeleteKeyLimit(ctx, "limited", tier, "vip"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DeleteKeyLimit of no override: %v, want ErrNotFound", err)
	}
	if m := must(c.Metrics(ctx))(t); !strings.Contains(string(m), "# TYPE ") {
		t.Errorf("Metrics: %.200s", m)
	}

	n := must(client.NewNATS(a.connect(t)))(t)
	if _, err := n.Queues(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Queues over NATS: %v, want errors.ErrUnsupported", err)
	}
	if _, err := n.Pause(ctx, "limited", ""); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Pause over NATS: %v, want errors.ErrUnsupported", err)
	}
}

// adminSetup starts an admitter of yaml (adminConfig or one like it)
// whose admin keys file holds adminKey.
func adminSetup(t *testing.T, yaml string) *admitter {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin"), []byte(adminKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := startAdmitter(dir, yaml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("stopping the admitter: %v", err)
		}
	})
	return a
}
