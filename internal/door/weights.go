package door

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The weights endpoints (docs/design.md#fair-drain) take an admin key, as
// the limits endpoints do. {key} is a client key (GET: the weight it
// gets) or a pattern written as in backlog.fairness.weights, a key, a
// prefix such as tenant-*, or * (PUT, DELETE). The runtime rules are the
// queue's entry pace.RuntimeWeightsKey of the pacers' bucket, which the
// workers follow: this door writes it and reads it, it never caches it.

// newWeightChanges is spillway_weight_rule_changes_total, registered
// with reg (nil: not registered).
func newWeightChanges(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spillway_weight_rule_changes_total",
		Help: "Runtime fairness weight rules set and removed through this admitter's admin API, by queue and action (set, removed)."},
		[]string{"queue", "action"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// weightPath is the path of one key's or pattern's weight.
const weightPath = "/v1/queues/{queue}/weights/{key}"

// weightPattern reads {key} as a rule's pattern, as the configuration
// reads a key of backlog.fairness.weights: a trailing * makes a prefix.
func weightPattern(s string) (queue.KeyPattern, error) {
	switch {
	case s == "":
		return queue.KeyPattern{}, errors.New(`empty: want a key such as tenant-a, a prefix such as tenant-*, or * for every key`)
	case len(s) > admit.MaxKeyLen:
		return queue.KeyPattern{}, fmt.Errorf("%d bytes: want at most %d", len(s), admit.MaxKeyLen)
	}
	var p queue.KeyPattern
	p.Key, p.Prefix = strings.CutSuffix(s, "*")
	return p, nil
}

// weightRules are a queue's rules as the workers weigh its keys: the
// configuration's the admitters published (this admitter's own file's
// when none did yet) and the runtime's.
type weightRules struct {
	config  []queue.WeightRule
	runtime []pace.RuntimeWeight
}

// readWeights reads q's rules; no pacers' bucket yet is no rules.
func (h *httpDoor) readWeights(ctx context.Context, q *config.Queue) (weightRules, error) {
	out := weightRules{config: q.Backlog.Fairness.Weights}
	kv, err := h.o.JS.KeyValue(ctx, pace.PacerBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	if rules, ok, err := pace.ReadWeights(ctx, kv, q.Name); err != nil {
		return out, err
	} else if ok {
		out.config = rules
	}
	out.runtime, err = pace.ReadRuntimeWeights(ctx, kv, q.Name)
	return out, err
}

// weightOf is key's KeyWeight under rs: the most specific rule of the
// union, a runtime rule replacing the configuration's of its pattern.
func (rs weightRules) weightOf(queueName, key string) spillway.KeyWeight {
	kw := spillway.KeyWeight{Queue: queueName, Key: key, Weight: 1, Source: spillway.WeightSourceDefault}
	var rt []queue.WeightRule
	for _, r := range rs.runtime {
		rt = append(rt, r.WeightRule)
	}
	for _, r := range pace.MergeWeights(rs.config, rt) { // most specific first
		if !r.Match(key) {
			continue
		}
		kw.Weight, kw.Pattern, kw.Source = r.Weight, r.String(), spillway.WeightSourceConfig
		for _, o := range rs.runtime {
			if o.KeyPattern == r.KeyPattern {
				kw.Source, kw.By, kw.At = spillway.WeightSourceRuntime, o.By, timeOrNil(o.At)
			}
		}
		break
	}
	return kw
}

// weights is GET /v1/queues/{queue}/weights: every rule, the
// configuration's and the runtime's, by pattern, each saying whether it
// is in force.
func (h *httpDoor) weights(w http.ResponseWriter, r *http.Request, _ string) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return
	}
	rs, err := h.readWeights(r.Context(), q)
	if err != nil {
		h.unavailable(w, r, "reading the weights of queue "+q.Name, err)
		return
	}
	out := spillway.WeightList{Queue: q.Name, Rules: []spillway.WeightRule{}}
	replaced := map[queue.KeyPattern]bool{}
	for _, o := range rs.runtime {
		replaced[o.KeyPattern] = true
	}
	for _, c := range rs.config {
		out.Rules = append(out.Rules, spillway.WeightRule{Key: c.String(), Weight: c.Weight, Source: spillway.WeightSourceConfig,
			InForce: !replaced[c.KeyPattern]})
	}
	for _, o := range rs.runtime {
		out.Rules = append(out.Rules, spillway.WeightRule{Key: o.String(), Weight: o.Weight, Source: spillway.WeightSourceRuntime,
			InForce: true, By: o.By, At: timeOrNil(o.At)})
	}
	sortWeightRules(out.Rules)
	writeJSON(w, http.StatusOK, "application/json", out)
}

// sortWeightRules orders rules by pattern, config before runtime.
func sortWeightRules(rules []spillway.WeightRule) {
	for i := 1; i < len(rules); i++ { // few rules: an insertion sort keeps equal patterns in order
		for j := i; j > 0 && rules[j].Key < rules[j-1].Key; j-- {
			rules[j], rules[j-1] = rules[j-1], rules[j]
		}
	}
}

// keyWeight is GET /v1/queues/{queue}/weights/{key}: the weight the key
// gets, and the rule it comes from.
func (h *httpDoor) keyWeight(w http.ResponseWriter, r *http.Request, _ string) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	if len(key) > admit.MaxKeyLen {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: "key",
			Detail: fmt.Sprintf("a key of %d bytes: want at most %d", len(key), admit.MaxKeyLen)})
		return
	}
	rs, err := h.readWeights(r.Context(), q)
	if err != nil {
		h.unavailable(w, r, "reading the weights of queue "+q.Name, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", rs.weightOf(q.Name, key))
}

// setWeight is PUT /v1/queues/{queue}/weights/{key} with {"weight": N}:
// the runtime rule is stored where every worker follows it, and weighs
// the jobs already waiting within a second. 200 with the rule.
func (h *httpDoor) setWeight(w http.ResponseWriter, r *http.Request, by string) {
	q, p, ok := h.weightRuleOf(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, min(h.cfg().HTTP.MaxBodyBytes, 64<<10), tooLarge)
	if !ok {
		return
	}
	weight, field, err := decodeWeight(body)
	if err != nil {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: field,
			Detail: err.Error()})
		return
	}
	kv, err := pace.OpenPacerBucket(r.Context(), h.o.JS, max(h.cfg().NATS.Replicas, 1))
	if err != nil {
		h.unavailable(w, r, "setting a weight of queue "+q.Name, err)
		return
	}
	rw := pace.RuntimeWeight{WeightRule: queue.WeightRule{KeyPattern: p, Weight: weight}, By: by, At: time.Now().UTC()}
	if err := pace.SetRuntimeWeight(r.Context(), kv, q.Name, rw); err != nil {
		if errors.Is(err, pace.ErrTooManyWeights) {
			problem(w, r, http.StatusConflict, spillway.Problem{Type: spillway.ProblemConflict, Title: "Too many weight rules", Field: "key",
				Detail: err.Error()})
			return
		}
		h.unavailable(w, r, "storing a weight of queue "+q.Name, err)
		return
	}
	h.weightChanges.WithLabelValues(q.Name, "set").Inc()
	h.o.Logger.Info("door: weight set", "queue", q.Name, "key_hash", queue.KeyHash(p.String()), "prefix", p.Prefix,
		"weight", weight, "by", by)
	writeJSON(w, http.StatusOK, "application/json", spillway.KeyWeight{Queue: q.Name, Key: p.String(), Weight: weight,
		Source: spillway.WeightSourceRuntime, Pattern: p.String(), By: by, At: timeOrNil(rw.At)})
}

// deleteWeight is DELETE /v1/queues/{queue}/weights/{key}: the runtime
// rule of that pattern is removed (204); 404 when there is none.
func (h *httpDoor) deleteWeight(w http.ResponseWriter, r *http.Request, by string) {
	q, p, ok := h.weightRuleOf(w, r)
	if !ok {
		return
	}
	kv, err := pace.OpenPacerBucket(r.Context(), h.o.JS, max(h.cfg().NATS.Replicas, 1))
	if err != nil {
		h.unavailable(w, r, "removing a weight of queue "+q.Name, err)
		return
	}
	found, err := pace.DeleteRuntimeWeight(r.Context(), kv, q.Name, p)
	if err != nil {
		h.unavailable(w, r, "removing a weight of queue "+q.Name, err)
		return
	}
	if !found {
		detail := fmt.Sprintf("queue %s has no runtime weight of %.80q", q.Name, p.String())
		for _, c := range q.Backlog.Fairness.Weights {
			if c.KeyPattern == p {
				detail += "; its rule in backlog.fairness.weights of the configuration file stays until the file changes"
			}
		}
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "No such weight", Detail: detail})
		return
	}
	h.weightChanges.WithLabelValues(q.Name, "removed").Inc()
	h.o.Logger.Info("door: weight removed", "queue", q.Name, "key_hash", queue.KeyHash(p.String()), "prefix", p.Prefix, "by", by)
	w.WriteHeader(http.StatusNoContent)
}

// weightRuleOf resolves {queue} and {key}, the rule a PUT or DELETE is
// about: 404 for an unknown queue, 400 for a key that is no pattern.
func (h *httpDoor) weightRuleOf(w http.ResponseWriter, r *http.Request) (*config.Queue, queue.KeyPattern, bool) {
	q, ok := h.queueOf(w, r)
	if !ok {
		return nil, queue.KeyPattern{}, false
	}
	p, err := weightPattern(r.PathValue("key"))
	if err != nil {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: "key",
			Detail: "the key or pattern: " + err.Error()})
		return nil, queue.KeyPattern{}, false
	}
	return q, p, true
}

// decodeWeight reads a PUT's body, {"weight": N}; a problem names the
// field.
func decodeWeight(body []byte) (int, string, error) {
	const want = `want a JSON object such as {"weight": 3}`
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return 0, "", errors.New("the body: " + want)
	}
	for name := range fields {
		if name != "weight" {
			return 0, name, fmt.Errorf("unknown field %.40q: %s", name, want)
		}
	}
	raw, ok := fields["weight"]
	if !ok {
		return 0, "weight", errors.New("weight is missing: " + want)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	err := dec.Decode(&v)
	n, ok := v.(json.Number)
	if err != nil || !ok {
		return 0, "weight", fmt.Errorf("weight %.40s: want an integer from 1 to %d", raw, queue.MaxWeight)
	}
	w, err := n.Int64()
	if err != nil || w < 1 || w > queue.MaxWeight {
		return 0, "weight", fmt.Errorf("weight %s: want an integer from 1 to %d", n, queue.MaxWeight)
	}
	return int(w), "", nil
}
