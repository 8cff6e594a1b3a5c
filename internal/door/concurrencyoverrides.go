package door

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The concurrency endpoints (docs/design.md#per-key-concurrency) take an
// admin key, as the limits endpoints do, and keep their runtime
// overrides in the same bucket. {name} is a concurrency entry's name;
// {key} a client key (GET: the max it gets) or a pattern, a key or a
// prefix such as tenant-* (PUT, DELETE).

// concurrencyPath is the path of one key's max under one entry.
const concurrencyPath = "/v1/queues/{queue}/concurrency/{name}/keys/{key}"

// concurrencyOf resolves {queue} and {name}, answering 404 when either is
// unknown.
func (h *httpDoor) concurrencyOf(w http.ResponseWriter, r *http.Request) (*config.Queue, config.Concurrency, bool) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return nil, config.Concurrency{}, false
	}
	name := r.PathValue("name")
	i := slices.IndexFunc(q.Concurrency, func(c config.Concurrency) bool { return c.Name == name })
	if i < 0 {
		detail := fmt.Sprintf("queue %s has no concurrency entries", q.Name)
		if len(q.Concurrency) > 0 {
			names := make([]string, len(q.Concurrency))
			for j, c := range q.Concurrency {
				names[j] = c.Name
			}
			detail = fmt.Sprintf("queue %s has no concurrency entry %.80q: name one of %s", q.Name, name, joinNames(names))
		}
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown concurrency entry", Detail: detail})
		return nil, config.Concurrency{}, false
	}
	return q, q.Concurrency[i], true
}

// concurrencyList is GET /v1/queues/{queue}/concurrency: every entry's
// own max and its overrides, the configuration's and the runtime's.
func (h *httpDoor) concurrencyList(w http.ResponseWriter, r *http.Request, _ string) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return
	}
	out := spillway.ConcurrencyList{Queue: q.Name, Entries: make([]spillway.ConcurrencyEntry, len(q.Concurrency))}
	for i, c := range q.Concurrency {
		e := spillway.ConcurrencyEntry{Name: c.Name, KeyedBy: c.Key.String(), Max: c.Max, Overrides: []spillway.ConcurrencyOverride{}}
		for _, o := range c.Overrides.List() {
			e.Overrides = append(e.Overrides, spillway.ConcurrencyOverride{Key: o.Pattern.String(), Max: o.Max,
				Source: string(o.Source), By: o.By, At: timeOrNil(o.At), Line: o.Line})
		}
		out.Entries[i] = e
	}
	writeJSON(w, http.StatusOK, "application/json", out)
}

// keyConcurrency is GET .../concurrency/{name}/keys/{key}: the max the
// key gets, and where it comes from.
func (h *httpDoor) keyConcurrency(w http.ResponseWriter, r *http.Request, _ string) {
	q, c, ok := h.concurrencyOf(w, r)
	if !ok {
		return
	}
	key, ok := clientKeyOf(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, "application/json", keyConcurrencyOf(q, c, key, c.Overrides.Match(key)))
}

// keyConcurrencyOf is the KeyConcurrencyMax of key under entry c of q:
// o's, or the entry's own max when o is nil.
func keyConcurrencyOf(q *config.Queue, c config.Concurrency, key string, o *overrides.Override) spillway.KeyConcurrencyMax {
	k := spillway.KeyConcurrencyMax{Queue: q.Name, Concurrency: c.Name, Key: key, Max: c.Max, Source: spillway.LimitSourceDefault}
	if o != nil {
		k.Max, k.Source, k.Pattern = o.Max, string(o.Source), o.Pattern.String()
		k.By, k.At, k.Line = o.By, timeOrNil(o.At), o.Line
	}
	return k
}

// setKeyConcurrency is PUT .../concurrency/{name}/keys/{key} with
// {"max": N}: the override is stored in the runtime overrides' bucket,
// where every admitter follows it. 200 with the override.
func (h *httpDoor) setKeyConcurrency(w http.ResponseWriter, r *http.Request, by string) {
	q, c, p, ok := h.concurrencyOverrideOf(w, r)
	if !ok {
		return
	}
	body, ok := h.overrideBody(w, r)
	if !ok {
		return
	}
	n, field, err := decodeConcurrencyMax(body)
	if err != nil {
		badRequest(w, r, field, err)
		return
	}
	rec := overrides.Record{Target: overrides.Target{Queue: q.Name, Concurrency: c.Name}, Key: p.String(), Max: n, By: by, At: time.Now().UTC()}
	o, err := admit.RuntimeConcurrencyOverride(c, rec)
	if err != nil { // decodeConcurrencyMax and concurrencyOverrideOf checked what it checks
		badRequest(w, r, "", err)
		return
	}
	if !h.storeOverride(w, r, rec) {
		return
	}
	h.o.Logger.Info("door: concurrency override set", "queue", q.Name, "concurrency", c.Name, "key_hash", queue.KeyHash(p.String()),
		"prefix", p.Prefix, "max", n, "by", by)
	writeJSON(w, http.StatusOK, "application/json", keyConcurrencyOf(q, c, p.String(), &o))
}

// deleteKeyConcurrency is DELETE .../concurrency/{name}/keys/{key}: the
// runtime override of that pattern is removed (204); 404 when there is
// none.
func (h *httpDoor) deleteKeyConcurrency(w http.ResponseWriter, r *http.Request, by string) {
	q, c, p, ok := h.concurrencyOverrideOf(w, r)
	if !ok {
		return
	}
	if !h.removeOverride(w, r, overrides.Target{Queue: q.Name, Concurrency: c.Name}, p, c.Overrides.Get(p)) {
		return
	}
	h.o.Logger.Info("door: concurrency override removed", "queue", q.Name, "concurrency", c.Name, "key_hash", queue.KeyHash(p.String()),
		"prefix", p.Prefix, "by", by)
	w.WriteHeader(http.StatusNoContent)
}

// concurrencyOverrideOf resolves {queue}, {name} and {key}, the override
// a PUT or DELETE is about: 404 as concurrencyOf, 400 for a key that is
// not a pattern, or for a global entry, which has no keys to override.
func (h *httpDoor) concurrencyOverrideOf(w http.ResponseWriter, r *http.Request) (*config.Queue, config.Concurrency, overrides.Pattern, bool) {
	q, c, ok := h.concurrencyOf(w, r)
	if !ok {
		return nil, c, overrides.Pattern{}, false
	}
	if c.Key.Kind == config.KeyGlobal {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: "name",
			Detail: fmt.Sprintf("concurrency entry %s is global: it has one key, which its own max bounds; overrides apply to header:NAME and ip entries", c.Name)})
		return nil, c, overrides.Pattern{}, false
	}
	p, ok := patternOf(w, r)
	return q, c, p, ok
}

// decodeConcurrencyMax reads a PUT's body, {"max": N} with N from 1 to
// queue.MaxConcurrency. A problem names the field.
func decodeConcurrencyMax(body []byte) (int, string, error) {
	want := fmt.Sprintf("an integer from 1 to %d: how many jobs of one key run at once", queue.MaxConcurrency)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return 0, "", errors.New(`the body: want a JSON object such as {"max": 5}`)
	}
	for name := range fields {
		if name != "max" {
			return 0, name, fmt.Errorf(`unknown field %.40q: want only "max"`, name)
		}
	}
	raw, ok := fields["max"]
	if !ok {
		return 0, "max", fmt.Errorf("max: missing: want %s", want)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < 1 || n > queue.MaxConcurrency {
		return 0, "max", fmt.Errorf("max: want %s, got %.40s", want, raw)
	}
	return n, "", nil
}
