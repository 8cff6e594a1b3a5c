package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The concurrency admin calls against a real admitter: a key's max
// listed, set, read and deleted; a submit key is refused, an unknown
// entry and a max out of range are problems, a NATS client sends none.
func TestConcurrencyAdminCalls(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(adminConfig, "    backlog: {capacity: 10, leak_rate: 1/m}\n",
		"    backlog: {capacity: 10, leak_rate: 1/m}\n    concurrency: [{name: per-client, key: \"header:X-Client\", max: 2}]\n", 1)
	a := adminSetup(t, yaml)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	checked := client.WithHTTPClient(apitest.Client(t, &http.Client{}))
	c := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey), checked))(t)
	admin := must(client.NewHTTP(a.httpURL(), client.WithAPIKey(adminKey), checked))(t)

	if _, err := c.Concurrency(ctx, "limited"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("Concurrency with a submit key: %v, want ErrForbidden", err)
	}
	if _, err := c.SetKeyConcurrency(ctx, "limited", "per-client", "vip", 5); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("SetKeyConcurrency with a submit key: %v, want ErrForbidden", err)
	}
	l := must(admin.Concurrency(ctx, "limited"))(t)
	if len(l.Entries) != 1 || l.Entries[0].Name != "per-client" || l.Entries[0].Max != 2 || len(l.Entries[0].Overrides) != 0 {
		t.Fatalf("Concurrency: %+v, want one entry of max 2 without overrides", l)
	}
	if _, err := admin.KeyConcurrency(ctx, "limited", "nope", "vip"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("KeyConcurrency of an unknown entry: %v, want ErrNotFound", err)
	}
	var pe *client.ProblemError
	if _, err := admin.SetKeyConcurrency(ctx, "limited", "per-client", "vip", 0); !errors.As(err, &pe) || pe.Status != http.StatusBadRequest || pe.Field != "max" {
		t.Errorf("SetKeyConcurrency of max 0: %v, want a 400 naming max", err)
	}
	if _, err := admin.KeyConcurrency(ctx, "limited", "", "vip"); !errors.Is(err, client.ErrInvalidOption) {
		t.Errorf("KeyConcurrency without an entry: %v, want ErrInvalidOption", err)
	}

	set := must(admin.SetKeyConcurrency(ctx, "limited", "per-client", "vip", 5))(t)
	if set.Source != spillway.LimitSourceRuntime || set.Max != 5 || set.Concurrency != "per-client" || set.By == "" {
		t.Errorf("SetKeyConcurrency: %+v", set)
	}
	admittest.WaitFor(t, 10*time.Second, "the override in force", func() bool {
		k, err := admin.KeyConcurrency(ctx, "limited", "per-client", "vip")
		return err == nil && k.Source == spillway.LimitSourceRuntime && k.Max == 5
	})
	if l := must(admin.Concurrency(ctx, "limited"))(t); len(l.Entries[0].Overrides) != 1 || l.Entries[0].Overrides[0].Key != "vip" {
		t.Errorf("Concurrency after the override: %+v", l)
	}
	if err := admin.DeleteKeyConcurrency(ctx, "limited", "per-client", "vip"); err != nil {
		t.Errorf("DeleteKeyConcurrency: %v", err)
	}
	admittest.WaitFor(t, 10*time.Second, "the entry's max again", func() bool {
		k, err := admin.KeyConcurrency(ctx, "limited", "per-client", "vip")
		return err == nil && k.Source == spillway.LimitSourceDefault && k.Max == 2
	})
	if err := admin.DeleteKeyConcurrency(ctx, "limited", "per-client", "vip"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DeleteKeyConcurrency of no override: %v, want ErrNotFound", err)
	}

	n := must(client.NewNATS(a.connect(t)))(t)
	if _, err := n.Concurrency(ctx, "limited"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Concurrency over NATS: %v, want errors.ErrUnsupported", err)
	}
}
