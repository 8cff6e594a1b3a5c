package admit_test

import (
	"slices"
	"testing"

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
