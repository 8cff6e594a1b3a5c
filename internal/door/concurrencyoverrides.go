package door

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

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
func (h *httpDoor) concurrencyOf(w http.ResponseWriter, r *http.Request) (overrideScope, bool) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return nil, false
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
		return nil, false
	}
	return concurrencyScope{q: q, c: q.Concurrency[i]}, true
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

// concurrencyScope is entry c of queue q, the scope of a concurrency
// override: GET, PUT and DELETE of .../concurrency/{name}/keys/{key}
// (keyOverride, setKeyOverride, deleteKeyOverride). A PUT's body is
// {"max": N}.
type concurrencyScope struct {
	q *config.Queue
	c config.Concurrency
}

func (s concurrencyScope) target() overrides.Target {
	return overrides.Target{Queue: s.q.Name, Concurrency: s.c.Name}
}

func (s concurrencyScope) table() *overrides.Table { return s.c.Overrides }

func (s concurrencyScope) keyed() (string, error) {
	if s.c.Key.Kind == config.KeyGlobal {
		return "name", fmt.Errorf("concurrency entry %s is global: it has one key, which its own max bounds; overrides apply to header:NAME and ip entries", s.c.Name)
	}
	return "", nil
}

// answer is the KeyConcurrencyMax of key under the entry: o's, or the
// entry's own max when o is nil.
func (s concurrencyScope) answer(key string, o *overrides.Override) any {
	k := spillway.KeyConcurrencyMax{Queue: s.q.Name, Concurrency: s.c.Name, Key: key, Max: s.c.Max, Source: spillway.LimitSourceDefault}
	if o != nil {
		k.Max, k.Source, k.Pattern = o.Max, string(o.Source), o.Pattern.String()
		k.By, k.At, k.Line = o.By, timeOrNil(o.At), o.Line
	}
	return k
}

// override reads the max (decodeConcurrencyMax).
func (s concurrencyScope) override(body []byte, rec *overrides.Record) (overrides.Override, string, error) {
	n, field, err := decodeConcurrencyMax(body)
	if err != nil {
		return overrides.Override{}, field, err
	}
	rec.Max = n
	o, err := admit.RuntimeConcurrencyOverride(s.c, *rec)
	if err != nil { // decodeConcurrencyMax and keyed checked what it checks
		return overrides.Override{}, "", err
	}
	return o, "", nil
}

func (s concurrencyScope) kind() string   { return "concurrency" }
func (s concurrencyScope) logArgs() []any { return []any{"queue", s.q.Name, "concurrency", s.c.Name} }
func (s concurrencyScope) setting(o overrides.Override) (string, any) {
	return "max", o.Max
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
