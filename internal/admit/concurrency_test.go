package admit_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// TestSubmitStampsConcurrencyKeys: an admitted and a queued job carry one
// stamp per concurrency entry that keys them — the entry's name, the
// key's max (its override's) and the key's token, never the raw key —
// and an entry whose header the request lacks does not bound the job.
func TestSubmitStampsConcurrencyKeys(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, delay: 0}
    backlog: {capacity: 10, leak_rate: 1/m}
    concurrency:
      - {name: per-client, key: "header:X-Client", max: 2, overrides: [{key: "vip-*", max: 8}]}
      - {name: per-region, key: "header:X-Region", max: 3}
      - {name: all, key: global, max: 50}
`, setupOptions{})
	for _, c := range []struct {
		key  string
		dest queue.Destination
		want []string
	}{
		{"tenant-a", queue.Ready, []string{"per-client:2:" + queue.KeyToken("tenant-a"), "all:50:" + queue.KeyToken("")}},
		{"vip-1", queue.Ready, []string{"per-client:8:" + queue.KeyToken("vip-1"), "all:50:" + queue.KeyToken("")}},
		{"tenant-a", queue.Backlog, []string{"per-client:2:" + queue.KeyToken("tenant-a"), "all:50:" + queue.KeyToken("")}},
	} {
		ans := submit(t, a, request("q", c.key))
		h := storedHeader(t, b, "q", c.dest, c.key)
		if got := h.Values(queue.HeaderConcurrencyKey); !slices.Equal(got, c.want) {
			t.Errorf("key %s (%s): %s %q, want %q", c.key, ans.Reply.Status, queue.HeaderConcurrencyKey, got, c.want)
		}
		j, err := queue.ParseJob(h, nil)
		if err != nil || len(j.Concurrency) != 2 || j.Concurrency[0].Name != "per-client" || j.Header.Get(queue.HeaderConcurrencyKey) != "" {
			t.Errorf("key %s: the stored job reads as %+v, %v; want two bounds, not among its own headers", c.key, j.Concurrency, err)
		}
	}
}

// TestRuntimeConcurrencyOverrides: the admin API's overrides of a
// concurrency entry's max are merged as a tier's are — the most specific
// pattern wins, and a runtime override replaces the file's of the same
// pattern — and the jobs submitted after them are stamped with their max;
// one that names no entry, or a global entry, or a max out of range, is
// left out.
func TestRuntimeConcurrencyOverrides(t *testing.T) {
	t.Parallel()
	a, b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 100/s, burst: 100}
    backlog: {capacity: 10, leak_rate: 1/m}
    concurrency:
      - {name: per-client, key: "header:X-Client", max: 2, overrides: [{key: "vip-*", max: 8}, {key: vip-1, max: 9}]}
      - {name: all, key: global, max: 50}
`, setupOptions{})
	rec := func(name, key string, n int) overrides.Record {
		return overrides.Record{Target: overrides.Target{Queue: "q", Concurrency: name}, Key: key, Max: n, By: "sha256:0", At: time.Now()}
	}
	a.SetRuntimeOverrides([]overrides.Record{
		rec("per-client", "vip-*", 3),    // replaces the file's vip-*
		rec("per-client", "tenant-a", 4), // a key the file leaves at 2
		rec("per-client", "*", 5),        // every other key
		rec("no-such-entry", "x", 1),
		rec("all", "x", 1),
		rec("per-client", "too-many", queue.MaxConcurrency+1),
		{Target: overrides.Target{Queue: "q", Tier: "no-such-tier"}, Key: "x", Params: overrides.Params{Rate: "1/s", Burst: 1}},
	})
	c := a.Config().Queue("q").Concurrency[0]
	if n := c.Overrides.Len(); n != 4 {
		t.Errorf("per-client has %d overrides, want 4 (vip-1 and the runtime vip-*, tenant-a and *): %+v", n, c.Overrides.List())
	}
	for key, want := range map[string]int{"vip-1": 9, "vip-2": 3, "tenant-a": 4, "too-many": 5, "other": 5} {
		submit(t, a, request("q", key))
		h := storedHeader(t, b, "q", queue.Ready, key)
		stamp := "per-client:" + strconv.Itoa(want) + ":" + queue.KeyToken(key)
		if got := h.Values(queue.HeaderConcurrencyKey); len(got) != 2 || got[0] != stamp || got[1] != "all:50:"+queue.KeyToken("") {
			t.Errorf("key %s: %s %q, want %s and all:50", key, queue.HeaderConcurrencyKey, got, stamp)
		}
	}
	// Gone, the file's overrides are back; a reload keeps runtime ones.
	a.SetRuntimeOverrides([]overrides.Record{rec("per-client", "tenant-a", 4)})
	a.SetConfig(b.Config)
	c = a.Config().Queue("q").Concurrency[0]
	for key, want := range map[string]int{"vip-2": 8, "tenant-a": 4, "other": 2} {
		if got := c.MaxOf(key); got != want {
			t.Errorf("after the runtime overrides changed and a reload, MaxOf(%q) = %d, want %d", key, got, want)
		}
	}
}
