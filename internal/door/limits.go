package door

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The limits endpoints (docs/design.md#per-key-overrides) take an admin
// key, as pause and resume do. {tier} is a tier's name or its index in
// the queue's limits; {key} a client key (GET: the limit it gets) or a
// pattern, a key or a prefix such as tenant-* (PUT, DELETE).

// limitPath is the path of one key's limit in one tier.
const limitPath = "/v1/queues/{queue}/limits/{tier}/keys/{key}"

// limitParamNames are the fields a PUT's body may hold.
var limitParamNames = []string{"rate", "burst", "delay", "nodelay", "limit", "window"}

// tierOf resolves {queue} and {tier}, answering 404 when either is
// unknown.
func (h *httpDoor) tierOf(w http.ResponseWriter, r *http.Request) (overrideScope, bool) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return nil, false
	}
	tier := r.PathValue("tier")
	i := slices.IndexFunc(q.Limits, func(l config.Limit) bool { return l.Name == tier })
	if n, err := strconv.Atoi(tier); i < 0 && err == nil && n >= 0 && n < len(q.Limits) {
		i = n
	}
	if i < 0 {
		names := make([]string, len(q.Limits))
		for j, l := range q.Limits {
			names[j] = l.Name
		}
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown tier",
			Detail: fmt.Sprintf("queue %s has no tier %.80q: name one of %s, or give its index from 0 to %d", q.Name, tier, joinNames(names), len(q.Limits)-1)})
		return nil, false
	}
	return tierScope{q: q, i: i}, true
}

func joinNames(names []string) string {
	b, _ := json.Marshal(names)
	return string(b)
}

// limits is GET /v1/queues/{queue}/limits: every tier's own parameters
// and its overrides, the configuration's and the runtime's.
func (h *httpDoor) limits(w http.ResponseWriter, r *http.Request, _ string) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return
	}
	out := spillway.LimitList{Queue: q.Name, Tiers: make([]spillway.TierLimits, len(q.Limits))}
	for i, l := range q.Limits {
		t := spillway.TierLimits{Tier: l.Name, Index: i, KeyedBy: l.Key.String(), Mode: string(l.Mode),
			Algorithm: l.Limit.Algorithm().String(), LimitParams: overrides.ParamsOf(l.Limit), Overrides: []spillway.LimitOverride{}}
		for _, o := range l.Overrides.List() {
			t.Overrides = append(t.Overrides, spillway.LimitOverride{Key: o.Pattern.String(), LimitParams: o.Params,
				Source: string(o.Source), By: o.By, At: timeOrNil(o.At), Line: o.Line})
		}
		out.Tiers[i] = t
	}
	writeJSON(w, http.StatusOK, "application/json", out)
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// tierScope is tier i of queue q, the scope of a limit override: GET,
// PUT and DELETE of .../limits/{tier}/keys/{key} (keyOverride,
// setKeyOverride, deleteKeyOverride). A PUT's body holds the parameters
// as a JSON object.
type tierScope struct {
	q *config.Queue
	i int
}

func (s tierScope) tier() config.Limit { return s.q.Limits[s.i] }

func (s tierScope) target() overrides.Target {
	return overrides.Target{Queue: s.q.Name, Tier: s.tier().Name}
}

func (s tierScope) table() *overrides.Table { return s.tier().Overrides }

func (s tierScope) keyed() (string, error) {
	if l := s.tier(); l.Key.Kind == config.KeyGlobal {
		return "tier", fmt.Errorf("tier %s is global: it has one key, which its own parameters limit; overrides apply to header:NAME and ip tiers", l.Name)
	}
	return "", nil
}

// answer is the KeyLimit of key in the tier: o's, or the tier's own limit
// when o is nil.
func (s tierScope) answer(key string, o *overrides.Override) any {
	def := s.tier().Limit
	k := spillway.KeyLimit{Queue: s.q.Name, Tier: s.tier().Name, TierIndex: s.i, Key: key, Algorithm: def.Algorithm().String(),
		LimitParams: overrides.ParamsOf(def), Source: spillway.LimitSourceDefault}
	if o != nil {
		k.LimitParams, k.Source, k.Pattern = o.Params, string(o.Source), o.Pattern.String()
		k.By, k.At, k.Line = o.By, timeOrNil(o.At), o.Line
	}
	return k
}

// override reads the parameters (decodeLimitParams) and builds the limit
// they make with the tier's algorithm; a parameter it does not take is
// named with the tier.
func (s tierScope) override(body []byte, rec *overrides.Record) (overrides.Override, string, error) {
	params, field, err := decodeLimitParams(body)
	if err != nil {
		return overrides.Override{}, field, err
	}
	rec.Params = params
	l := s.tier()
	o, err := admit.RuntimeOverride(l, *rec)
	if err != nil {
		var le *bucket.LimitError
		field := ""
		if errors.As(err, &le) {
			field = le.Field
			err = fmt.Errorf("%s for tier %s (%s): %s", le.Field, l.Name, l.Limit.Algorithm(), le.Reason)
			if le.Value != "" {
				err = fmt.Errorf("%s %q for tier %s (%s): %s", le.Field, le.Value, l.Name, l.Limit.Algorithm(), le.Reason)
			}
		}
		return overrides.Override{}, field, err
	}
	return o, "", nil
}

func (s tierScope) kind() string   { return "limit" }
func (s tierScope) logArgs() []any { return []any{"queue", s.q.Name, "tier", s.tier().Name} }
func (s tierScope) setting(o overrides.Override) (string, any) {
	return "limit", o.Limit.String()
}

// decodeLimitParams reads a PUT's body: a JSON object of limitParamNames.
// A problem names the field.
func decodeLimitParams(body []byte) (spillway.LimitParams, string, error) {
	var p spillway.LimitParams
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return p, "", fmt.Errorf(`the body: want a JSON object of the tier's parameters, such as {"rate": "100/s", "burst": 200}`)
	}
	for name := range fields {
		if !slices.Contains(limitParamNames, name) {
			return p, name, fmt.Errorf("unknown field %.40q: want %s (the algorithm is the tier's)", name, joinNames(limitParamNames))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return p, te.Field, fmt.Errorf("%s: want %s, got a JSON %s", te.Field, wantOf(te.Field), te.Value)
		}
		return p, "", fmt.Errorf("the body: %w", err)
	}
	return p, "", nil
}

func wantOf(field string) string {
	switch field {
	case "rate":
		return `a string such as "100/s"`
	case "window":
		return `a string such as "1m"`
	case "nodelay":
		return "true or false"
	}
	return "an integer"
}
