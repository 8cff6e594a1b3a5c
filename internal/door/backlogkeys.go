package door

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// keysCacheFor is how long a queue's key listing is served again rather
// than read anew: one listing reads every key's subject count and up to
// thousands of jobs, and a dashboard polling it should not repeat that
// for each viewer.
const keysCacheFor = time.Second

// keysRead, if set, is told of each read of a queue's listing (tests
// count them: export_test.go).
var keysRead atomic.Pointer[func(js jetstream.JetStream, q string)]

// keysCache holds the last key listing of each queue.
type keysCache struct {
	mu sync.Mutex
	m  map[string]*keysEntry
}

// keysEntry is one queue's last listing. Its mutex is held while the
// listing is read, so concurrent requests for a queue read it once.
//
// A listing read for top N serves every request for N keys or fewer — the
// ranking is the same, a shorter listing is its start — so requests that
// vary top (?top=5, ?top=20, ...) do not read the queue again. A listing is
// read at the largest top asked since the last read (at least
// admin.DefaultTopKeys), so clients that keep asking for different tops
// share one read per keysCacheFor; a request for more keys than the fresh
// listing holds reads it again once, at admin.MaxTopKeys, which serves
// every top until it expires. Each queue is read at most twice per
// keysCacheFor, whatever the requests.
type keysEntry struct {
	mu       sync.Mutex
	at       time.Time
	top      int // what the listing was read for
	want     int // the largest top asked since the listing was read
	keys     []admin.KeyBacklog
	total    int
	releases *worker.KeyReleases
	running  []spillway.KeyConcurrency // per-key concurrency (concurrencykeys.go)
}

func (c *keysCache) entry(q string) *keysEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*keysEntry{}
	}
	e := c.m[q]
	if e == nil {
		e = &keysEntry{}
		c.m[q] = e
	}
	return e
}

// queueKeys serves GET /v1/queues/{queue}/keys?top=N.
func (h *httpDoor) queueKeys(w http.ResponseWriter, r *http.Request) {
	cfg := h.cfg()
	q := cfg.Queue(r.PathValue("queue"))
	if q == nil {
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown queue",
			Detail: fmt.Sprintf("no queue %.80q; GET /v1/queues lists them", r.PathValue("queue"))})
		return
	}
	top, err := parseTop(r.URL.Query().Get("top"))
	if err != nil {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad top", Field: "top", Detail: err.Error()})
		return
	}
	e := h.keys.entry(q.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	read := 0 // the top to read the listing for; 0: serve the one held
	switch {
	case time.Since(e.at) >= keysCacheFor:
		read = max(top, e.want, admin.DefaultTopKeys)
	case top > e.top:
		read = admin.MaxTopKeys
	}
	e.want = max(e.want, top)
	if read > 0 {
		if err := h.readKeys(r.Context(), e, q.Name, read); err != nil {
			h.unavailable(w, r, "reading the keys of queue "+q.Name, err)
			return
		}
		e.want = top
	}
	writeJSON(w, http.StatusOK, "application/json", keyList(q.Name, e, top, cfg.HTTP.ShowRawKeys))
}

// readKeys reads a queue's listing into e.
func (h *httpDoor) readKeys(ctx context.Context, e *keysEntry, q string, top int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if f := keysRead.Load(); f != nil {
		(*f)(h.o.JS, q)
	}
	keys, total, err := admin.BacklogKeys(ctx, h.o.JS, q, top)
	if err != nil {
		return err
	}
	releases, err := worker.ReadKeyReleases(ctx, h.o.JS, q)
	if err != nil {
		// The listing stands without the shares.
		h.o.Logger.Warn("door: reading the drain's release counts", "queue", q, "err", err)
	}
	e.at, e.top, e.keys, e.total, e.releases = time.Now(), top, keys, total, releases
	e.running = h.readRunning(ctx, q)
	return nil
}

// keyList is the first top keys of a listing as the API shows it: raw
// keys only with http.show_raw_keys.
func keyList(q string, e *keysEntry, top int, raw bool) spillway.KeyList {
	keys := e.keys[:min(top, len(e.keys))]
	list := spillway.KeyList{Queue: q, Keys: make([]spillway.KeyInfo, 0, len(keys)), TotalKeys: e.total}
	if e.releases != nil {
		at := e.releases.At.UTC()
		list.ReleasesAt, list.ReleasesWindowS = &at, e.releases.WindowS
	}
	for _, k := range keys {
		ki := spillway.KeyInfo{
			KeyHash: k.Hash, Depth: k.Depth, OldestAgeMS: k.OldestAge.Milliseconds(), Weight: k.Weight,
			Priority: spillway.PriorityMix{High: k.Priorities[spillway.High], Normal: k.Priorities[spillway.Normal], Low: k.Priorities[spillway.Low]},
		}
		if raw {
			key := k.Key
			ki.Key = &key
		}
		if e.releases != nil {
			share := e.releases.Share(k.Hash)
			ki.ReleaseShare = &share
		}
		list.Keys = append(list.Keys, ki)
	}
	list.Concurrency = e.running[:min(top, len(e.running))]
	return list
}

// parseTop reads the top query parameter: empty means
// admin.DefaultTopKeys.
func parseTop(s string) (int, error) {
	if s == "" {
		return admin.DefaultTopKeys, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > admin.MaxTopKeys {
		return 0, fmt.Errorf("top %.40q: want an integer from 1 to %d", s, admin.MaxTopKeys)
	}
	return n, nil
}
