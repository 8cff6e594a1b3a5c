package door_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// keysConfig: per X-Client a first job admitted, the next ten queued;
// tenant-a weighs 4.
const keysConfig = `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 10, delay: 0}
    backlog: {capacity: 100, leak_rate: 1/m, fairness: {weights: {tenant-a: 4}}}
`

func (b *testBundle) keyList(t *testing.T, path string, header ...string) spillway.KeyList {
	t.Helper()
	r := b.get(t, path, header...)
	if r.code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	var l spillway.KeyList
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("GET %s: %s: %v", path, r.body, err)
	}
	return l
}

func TestHTTPBacklogKeys(t *testing.T) {
	t.Parallel()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	admins, err := door.LoadAPIKeys(writeFile(t, "admin-keys", adminKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, keysConfig, setupOptions{keys: keys, adminKeys: admins})
	auth := []string{"X-Api-Key", testKey}
	before := time.Now()
	for _, s := range []struct{ key, priority string }{
		{"tenant-a", ""}, {"tenant-a", "high"}, {"tenant-a", "low"}, {"tenant-a", "low"}, // admitted, then 3 queued
		{"tenant-b", "low"}, {"tenant-b", ""}, // admitted, then 1 queued
	} {
		if r := b.post(t, "q", nil, append([]string{"X-Client", s.key, spillway.HeaderPriority, s.priority}, auth...)...); r.code != http.StatusAccepted {
			t.Fatalf("submitting for %s: %d %s", s.key, r.code, r.body)
		}
	}
	if r := b.get(t, "/v1/queues/q/keys"); r.code != http.StatusUnauthorized {
		t.Errorf("without a key: %d %s, want 401", r.code, r.body)
	}
	// Every tenant's keys: an admin endpoint.
	if r := b.get(t, "/v1/queues/q/keys", auth...); r.code != http.StatusForbidden || r.problem.Type != spillway.ProblemForbidden {
		t.Errorf("with a submit key: %d %s, want 403", r.code, r.body)
	}
	auth = []string{"X-Api-Key", adminKey}

	l := b.keyList(t, "/v1/queues/q/keys", auth...)
	age := time.Since(before).Milliseconds()
	if l.Queue != "q" || l.TotalKeys != 2 || len(l.Keys) != 2 || l.ReleasesAt != nil {
		t.Fatalf("the listing: %+v, want 2 keys of queue q, no releases", l)
	}
	a, bb := l.Keys[0], l.Keys[1]
	if a.KeyHash != queue.KeyHash("tenant-a") || a.Key != nil || a.Depth != 3 || a.Weight != 4 || a.OldestAgeMS < 0 || a.OldestAgeMS > age ||
		a.Priority != (spillway.PriorityMix{High: 1, Low: 2}) || a.ReleaseShare != nil {
		t.Errorf("tenant-a: %+v, want its hash, no raw key, depth 3, weight 4, 1 high and 2 low of 3, no release share", a)
	}
	if bb.KeyHash != queue.KeyHash("tenant-b") || bb.Depth != 1 || bb.Weight != 1 || bb.Priority != (spillway.PriorityMix{Normal: 1}) {
		t.Errorf("tenant-b: %+v, want depth 1, weight 1, 1 normal", bb)
	}
	if l := b.keyList(t, "/v1/queues/q/keys?top=1", auth...); len(l.Keys) != 1 || l.Keys[0].KeyHash != a.KeyHash || l.TotalKeys != 2 {
		t.Errorf("top=1: %+v, want tenant-a alone of 2", l)
	}

	// The drain leader's release counts give each key its share.
	kv, err := pace.OpenPacerBucket(t.Context(), b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"at": "2026-01-02T03:04:05Z", "window_s": 60, "releases": {"` + a.KeyHash + `": 3, "` + bb.KeyHash + `": 1}}`
	if _, err := kv.Put(t.Context(), worker.KeyReleasesKey("q"), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	// The listing is cached (for a second, whatever the top): the shares
	// show once it is read again.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l = b.keyList(t, "/v1/queues/q/keys?top=5", auth...)
		if l.ReleasesAt != nil || time.Now().After(deadline) {
			break
		}
	}
	if l.ReleasesAt == nil || !l.ReleasesAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || l.ReleasesWindowS != 60 || len(l.Keys) != 2 ||
		l.Keys[0].ReleaseShare == nil || *l.Keys[0].ReleaseShare != 0.75 || l.Keys[1].ReleaseShare == nil || *l.Keys[1].ReleaseShare != 0.25 {
		t.Errorf("with release counts: %+v, want releases_at, window 60 s and shares 0.75 and 0.25", l)
	}

	// http.show_raw_keys, after a reload.
	b.admitter.SetConfig(admittest.LoadConfig(t, "http: {show_raw_keys: true}\n"+keysConfig))
	l = b.keyList(t, "/v1/queues/q/keys?top=5", auth...)
	if len(l.Keys) != 2 || l.Keys[0].Key == nil || *l.Keys[0].Key != "tenant-a" || l.Keys[1].Key == nil || *l.Keys[1].Key != "tenant-b" {
		t.Errorf("with show_raw_keys: %+v, want the raw keys", l)
	}

	for _, top := range []string{"0", "-1", "abc", "1001", "1.5"} {
		r := b.get(t, "/v1/queues/q/keys?top="+top, auth...)
		if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadRequest || r.problem.Field != "top" {
			t.Errorf("top=%s: %d %s, want 400 bad-request naming top", top, r.code, r.body)
		}
	}
	if r := b.get(t, "/v1/queues/nope/keys", auth...); r.code != http.StatusNotFound || r.problem.Type != spillway.ProblemNotFound {
		t.Errorf("an unknown queue: %d %s, want 404", r.code, r.body)
	}
	if r := b.do(t, http.MethodHead, "/v1/queues/q/keys", nil, auth...); r.code != http.StatusOK {
		t.Errorf("HEAD: %d, want 200", r.code)
	}
}

// Requests that vary top within the cache's second share one read of the
// queue's backlog: a listing read for the default 20 keys serves every top
// up to 20 as its start. Before, each change of top read the backlog anew,
// so clients asking different tops kept a core busy.
func TestHTTPBacklogKeysOneReadForAnyTop(t *testing.T) {
	t.Parallel()
	admins, err := door.LoadAPIKeys(writeFile(t, "admin-keys", adminKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, keysConfig, setupOptions{adminKeys: admins})
	for i := range 6 {
		key := "tenant-" + string(rune('a'+i))
		for range 1 + i%3 { // admitted, then 0 to 2 queued
			if r := b.post(t, "q", nil, "X-Client", key); r.code != http.StatusAccepted {
				t.Fatalf("submitting for %s: %d %s", key, r.code, r.body)
			}
		}
	}
	var reads atomic.Int32
	restore := door.OnKeysRead(func(js jetstream.JetStream, q string) {
		if js == b.JS && q == "q" { // another test's door is not this one
			reads.Add(1)
		}
	})
	t.Cleanup(restore)

	began := time.Now()
	full := b.keyList(t, "/v1/queues/q/keys", "X-Api-Key", adminKey)
	if len(full.Keys) != 4 {
		t.Fatalf("the listing: %+v, want the 4 keys with queued jobs", full)
	}
	for _, top := range []int{1, 20, 3, 2, 20, 1, 3, 2} {
		l := b.keyList(t, "/v1/queues/q/keys?top="+strconv.Itoa(top), "X-Api-Key", adminKey)
		want := full.Keys[:min(top, len(full.Keys))]
		if len(l.Keys) != len(want) || l.TotalKeys != full.TotalKeys || (len(want) > 0 && l.Keys[0].KeyHash != want[0].KeyHash) {
			t.Errorf("top=%d: %+v, want the first %d of %+v", top, l, len(want), full)
		}
	}
	// One read per second of the cache, however long the requests took.
	if n, most := reads.Load(), 1+int32(time.Since(began)/time.Second); n > most {
		t.Errorf("9 requests of varying top read the backlog %d times, want at most %d", n, most)
	}
}

// The keys listing shows every tenant's traffic: an admin endpoint, but
// open on an admitter without any keys (one anonymous tenant, who sees
// every job anyway, as on `admitter --dev`); with submit keys and no
// admin keys it is off for all.
func TestHTTPBacklogKeysWhoMayList(t *testing.T) {
	t.Parallel()
	open := setup(t, keysConfig, setupOptions{})
	if r := open.get(t, "/v1/queues/q/keys"); r.code != http.StatusOK {
		t.Errorf("no keys at all: %d %s, want 200", r.code, r.body)
	}
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	tenants := setup(t, keysConfig, setupOptions{keys: keys})
	for _, h := range [][]string{nil, {"X-Api-Key", testKey}} {
		if r := tenants.get(t, "/v1/queues/q/keys", h...); r.code == http.StatusOK {
			t.Errorf("submit keys, no admin keys, header %q: %d %s, want 401 or 403", h, r.code, r.body)
		}
	}
}
