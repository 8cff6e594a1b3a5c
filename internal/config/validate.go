package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/internal/yamlpos"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// This file turns the decoded document into a Config. The rules of
// limits, backlogs and retries are bucket's, queue's and retry's: their
// validation decides, and their problems are placed at the fields they
// name. The rules here are the configuration's own.

// defaults is the Config of an empty file.
func defaults() *Config {
	return &Config{
		NATS:  NATS{NATSConfig: conn.NATSConfig{URL: DefaultNATSURL}, Listen: DefaultNATSListen, Replicas: 1, ReplyPrefix: DefaultReplyPrefix},
		Redis: Redis{RedisConfig: conn.RedisConfig{Timeout: DefaultStoreTimeout}, FailureMode: FailOpen},
		HTTP: HTTP{Listen: DefaultHTTPListen, MaxBodyBytes: DefaultMaxBodyBytes,
			MaxInflightBytes: DefaultMaxInflightBytes, WriteTimeout: DefaultWriteTimeout},
		Worker: Worker{Concurrency: worker.DefaultConcurrency, GracePeriod: DefaultGracePeriod, AckWait: DefaultAckWait},
		Status: Status{TTL: DefaultStatusTTL},
	}
}

// errorf reports a problem with the value at p, an address in the
// document, at its place; nothing if place did not reach it (it is in a
// mapping already reported as wrong).
func (d *decoder) errorf(p any, format string, args ...any) {
	if a, ok := d.pos[p]; ok {
		d.add(a, fmt.Sprintf(format, args...))
	}
}

// missing reports that the file does not give p, after the other
// problems of its holder's line.
func (d *decoder) missing(p any, want string) {
	if a, ok := d.pos[p]; ok {
		a.col = math.MaxInt
		d.add(a, "missing: expected "+want)
	}
}

// need reports whether the file gives l, and reports it missing if not.
func (d *decoder) need(l leafer, want string) bool {
	if !l.base().given() {
		d.missing(l, want)
	}
	return l.base().given()
}

// str stores t in dst if it is given, a scalar and check accepts it.
func (d *decoder) str(t *text, dst *string, check func(string) error) bool {
	switch {
	case !t.given():
		return false
	case t.n.Kind != yaml.ScalarNode:
		d.errorf(t, "expected a string, got %s", yamlpos.Describe(t.n))
		return false
	case check != nil:
		if err := check(t.n.Value); err != nil {
			d.errorf(t, "%v", err)
			return false
		}
	}
	*dst = t.n.Value
	return true
}

// filename is str for a file name: relative to the file's directory.
func (d *decoder) filename(t *text, dst *string) {
	if d.str(t, dst, nil) && *dst != "" && !filepath.IsAbs(*dst) && d.pos[t].src == "" {
		*dst = filepath.Join(d.dir, *dst)
	}
}

// ranged stores i in dst if it is an integer from lo (≥ 0) to hi: a
// setting whose range is the configuration's own.
func (d *decoder) ranged(i *integer, dst *int64, lo, hi int64) {
	if i.given() && (i.V < lo || i.V > hi) {
		d.errorf(i, "expected %s, got %s", intRange(lo, hi), yamlpos.Describe(i.n))
	} else if i.given() {
		*dst = i.V
	}
}

// duration stores x in dst if it is given, a duration, and positive or
// ≥ 0 as the setting wants.
func (d *decoder) duration(x *duration, dst *time.Duration, positive bool) {
	switch {
	case !x.given() || x.err != nil:
	case positive && x.V <= 0:
		d.errorf(x, "expected a positive duration, got %s", yamlpos.Describe(x.n))
	case x.V < 0:
		d.errorf(x, "expected a duration ≥ 0, got %s", yamlpos.Describe(x.n))
	default:
		*dst = x.V
	}
}

func (d *decoder) boolean(b *boolean, dst *bool) bool {
	if b.given() && b.err == nil {
		*dst = b.V
	}
	return b.given() && b.err == nil
}

// owned places the problems of an owner's validation (errors.Join of
// *queue.FieldError or *retry.FieldError) at the fields field finds by
// the owner's names, with the text as the file writes it.
func (d *decoder) owned(err error, field func(name string) leafer) {
	for _, e := range unjoin(err) {
		var p struct{ field, value, want, other, otherValue string }
		if qe, ok := errors.AsType[*queue.FieldError](e); ok {
			p.field, p.value, p.want, p.other, p.otherValue = qe.Field, qe.Value, qe.Want, qe.Other, qe.OtherValue
		} else if re, ok := errors.AsType[*retry.FieldError](e); ok {
			p.field, p.value, p.want, p.other, p.otherValue = re.Field, re.Value, re.Want, re.Other, re.OtherValue
		} else { // not a field's problem: not to be lost either
			d.add(at{}, e.Error())
			continue
		}
		f, of := field(p.field), field(p.other)
		bad := func(l leafer) bool { return l != nil && l.base().err != nil }
		switch {
		case f == nil || bad(f) || bad(of):
			// reported where it is given (replicas at nats.replicas), or
			// its syntax was
		case of != nil && !f.base().given() && of.base().given():
			// The file gives only the bounding field: blame it. Both
			// bounds (per_key_capacity ≤ capacity, initial ≤ max) are
			// "at most".
			d.errorf(of, "expected at least %s (%s, the default), got %s", p.field, p.value, p.otherValue)
		case p.other != "":
			def := ""
			if of != nil && !of.base().given() {
				def = ", the default"
			}
			d.errorf(f, "expected %s (%s%s), got %s", p.want, p.otherValue, def, p.value)
		case f.base().given():
			d.errorf(f, "expected %s, got %s", p.want, yamlpos.Describe(f.base().n))
		default:
			d.errorf(f, "expected %s, got %s", p.want, p.value)
		}
	}
}

// blame places an owner's problem (handler's, conn's) at p, the leaf or
// the list it names: as missing (expected want) when the file does not
// give it; not at all when p is not in the file or its text is already
// reported (not a string, a syntax error); else problem.
func (d *decoder) blame(p any, want, problem string) {
	l, isLeaf := p.(leafer)
	list, isList := p.(*[]*text)
	switch {
	case p == nil || (isLeaf && (l.base().err != nil || (l.base().given() && l.base().n.Kind != yaml.ScalarNode))):
	case want != "" && ((isLeaf && !l.base().given()) || (isList && *list == nil)):
		d.missing(p, want)
	default:
		d.errorf(p, "%s", problem)
	}
}

// unjoin is the errors an errors.Join holds, or err alone (none for nil).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// byTag is the leaf of the document struct v named path, yaml names
// joined by dots ("fairness.min_share"), or nil.
func byTag(v reflect.Value, path string) leafer {
	name, rest, _ := strings.Cut(path, ".")
	for i := range v.NumField() {
		tag, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			if l := byTag(v.Field(i), path); l != nil {
				return l
			}
		case tag != name || path == "":
		case rest != "":
			if f := reflect.Indirect(v.Field(i)); f.IsValid() { // nil: a section not given
				return byTag(f, rest)
			}
			return nil
		default:
			l, _ := v.Field(i).Addr().Interface().(leafer)
			return l
		}
	}
	return nil
}

// config reads the document into c.
func (d *decoder) config(c *Config, doc *rootDoc) {
	n := &doc.NATS
	d.str(&n.URL, &c.NATS.URL, checkNATSURL)
	d.str(&n.Listen, &c.NATS.Listen, checkListen)
	d.filename(&n.StoreDir, &c.NATS.StoreDir)
	d.filename(&n.CredsFile, &c.NATS.CredsFile)
	d.filename(&n.NkeyFile, &c.NATS.NkeyFile)
	d.str(&n.InboxPrefix, &c.NATS.InboxPrefix, checkInboxPrefix)
	if c.NATS.CredsFile != "" && c.NATS.NkeyFile != "" {
		d.errorf(&n.NkeyFile, "expected one of nats.creds_file and nats.nkey_file, not both (a credentials file holds its own nkey seed)")
	}
	d.str(&n.ReplyPrefix, &c.NATS.ReplyPrefix, checkReplyPrefix)
	if n.Replicas.given() {
		r := int(max(-1, min(n.Replicas.V, 6))) // out of range either way, and an int on every platform
		if err := queue.ValidateReplicas(r); err != nil {
			d.owned(err, func(string) leafer { return &n.Replicas })
		} else {
			c.NATS.Replicas = r
		}
	}

	d.redis(&doc.Redis, &c.Redis)

	h := &doc.HTTP
	d.str(&h.Listen, &c.HTTP.Listen, checkListen)
	d.ranged(&h.MaxBodyBytes, &c.HTTP.MaxBodyBytes, 1, math.MaxInt64)
	d.ranged(&h.MaxInflightBytes, &c.HTTP.MaxInflightBytes, 1, math.MaxInt64)
	d.duration(&h.WriteTimeout, &c.HTTP.WriteTimeout, true)
	d.filename(&h.APIKeysFile, &c.HTTP.APIKeysFile)
	d.filename(&h.AdminKeysFile, &c.HTTP.AdminKeysFile)
	for _, s := range d.list(h.TrustedProxies, wantProxy, func(s string) error { _, err := parseProxy(s); return err }) {
		p, _ := parseProxy(s)
		c.HTTP.TrustedProxies = append(c.HTTP.TrustedProxies, p)
	}
	d.boolean(&h.ShowRawKeys, &c.HTTP.ShowRawKeys)

	w := &doc.Worker
	concurrency := int64(c.Worker.Concurrency)
	d.ranged(&w.Concurrency, &concurrency, 1, maxInt)
	c.Worker.Concurrency = int(concurrency)
	d.duration(&w.GracePeriod, &c.Worker.GracePeriod, false)
	d.duration(&w.AckWait, &c.Worker.AckWait, true)
	d.duration(&doc.Status.TTL, &c.Status.TTL, true)
	d.boolean(&doc.Status.RecordRunning, &c.Status.RecordRunning)

	if doc.Queues == nil {
		d.missing(&doc.Queues, "a list of queues, at least one")
		return
	}
	if len(doc.Queues) == 0 {
		d.errorf(&doc.Queues, "expected at least one queue, got an empty list")
	}
	first := map[string]int{} // queue name → line
	for _, qd := range doc.Queues {
		if qd == nil || !d.placed(qd) {
			continue
		}
		q := d.queue(qd, c.NATS.Replicas)
		if q.Name != "" {
			if line, dup := first[q.Name]; dup {
				d.errorf(&qd.Name, "queue %q is already defined at line %d", q.Name, line)
				continue
			}
			first[q.Name] = qd.Name.n.Line
		}
		c.Queues = append(c.Queues, q)
	}
	if c.HTTP.ShowRawKeys {
		d.rawCredentials(doc)
	}
}

// rawCredentials refuses http.show_raw_keys with a tier keyed on a
// credential header: GET /v1/queues/{queue}/keys would list the
// credentials themselves.
func (d *decoder) rawCredentials(doc *rootDoc) {
	for _, qd := range doc.Queues {
		if qd == nil {
			continue
		}
		for _, t := range qd.Limits {
			if t == nil || !t.Key.given() {
				continue
			}
			k, err := parseKey(t.Key.n.Value)
			if err != nil || k.Kind != KeyHeader || !CredentialHeader(k.Header) {
				continue
			}
			d.errorf(&t.Key, "keys on %s, a credential, while http.show_raw_keys is true (line %d), which would list its raw values in GET /v1/queues/{queue}/keys: set show_raw_keys to false, or key the tier on another header",
				k.Header, doc.HTTP.ShowRawKeys.n.Line)
		}
	}
}

// queue reads one item of queues.
func (d *decoder) queue(qd *queueDoc, replicas int) Queue {
	var q Queue
	if d.need(&qd.Name, wantQueue) {
		d.str(&qd.Name, &q.Name, checkQueueName)
	}
	switch limits := &qd.Limits; {
	case *limits == nil:
		d.missing(limits, `a list of limit tiers, such as [{key: global, rate: "10/s", burst: 20}]`)
	case len(*limits) == 0:
		d.errorf(limits, "expected at least one limit tier, got an empty list")
	case len(*limits) > bucket.MaxTiers:
		d.errorf(limits, "expected at most %d limit tiers, got %d", bucket.MaxTiers, len(*limits))
	}
	// Tiers may share a key ("10/s and 1000/h per API key"): the admitter
	// gives each tier its own bucket. Names are unique in the queue,
	// counting the default names of the tiers the file leaves unnamed.
	named := map[string]*limitDoc{} // names the file gives
	unnamed := map[string]int{}     // default names in use → tier index
	for i, t := range qd.Limits {
		if t == nil || !d.placed(t) {
			continue
		}
		l, ok := d.limit(t)
		if !ok {
			continue
		}
		if l.Name == "" {
			l.Name = DefaultTierName(i)
			unnamed[l.Name] = i
		} else {
			if first, dup := named[l.Name]; dup {
				d.errorf(&t.Name, "tier name %q is already given at line %d", l.Name, first.Name.n.Line)
				continue
			}
			named[l.Name] = t
		}
		q.Limits = append(q.Limits, l)
	}
	if len(q.Limits) > 0 && !slices.ContainsFunc(q.Limits, func(l Limit) bool { return !l.Shadow() }) {
		d.errorf(&qd.Limits, `every tier is mode: shadow; at least one must enforce (a queue admits through its enforcing tiers), such as {key: global, rate: "1000/s", burst: 1000}`)
	}
	for name, t := range named {
		if j, clash := unnamed[name]; clash {
			d.errorf(&t.Name, "tier name %q is the default name of limits[%d], which has no name; name that tier too, or choose another name", name, j)
		}
	}
	q.Backlog = d.backlog(qd, q.Name, replicas)
	q.Retry = d.retry(&qd.Retry)
	if qd.Handler != nil {
		q.Handler = d.handler(qd.Handler)
	}
	q.Concurrency = d.concurrency(qd.Concurrency)
	return q
}

// limit reads one limit tier, and bucket's Spec.Build decides whether it
// is a limit.
func (d *decoder) limit(t *limitDoc) (Limit, bool) {
	l := Limit{OnMissing: MissingReject, Mode: ModeEnforce}
	var s string
	if d.need(&t.Key, wantKey) && d.str(&t.Key, &s, nil) {
		k, err := parseKey(s)
		if err != nil {
			d.errorf(&t.Key, "%v", err)
		}
		l.Key = k
	}
	d.str(&t.Name, &l.Name, checkTierName)
	if d.str(&t.OnMissing, &s, oneOf(MissingReject, MissingShared)) {
		switch {
		case l.Key.Kind == KeyHeader:
			l.OnMissing = OnMissing(s)
		case t.Key.given():
			d.errorf(&t.OnMissing, "applies to header:NAME keys only, not to %s", l.Key)
		}
	}
	if d.str(&t.Mode, &s, oneOf(ModeEnforce, ModeShadow)) {
		l.Mode = Mode(s)
	}
	var alg string
	if d.str(&t.Algorithm, &alg, nil) {
		if _, err := bucket.ParseAlgorithm(alg); err != nil {
			var names []string
			for a := bucket.LeakyBucket; a <= bucket.SlidingWindow; a++ {
				names = append(names, a.String())
			}
			d.errorf(&t.Algorithm, "%v", yamlpos.WithSuggestion(expected("one of "+yamlpos.JoinOr(names, "or"), alg), alg, names))
			return l, false
		}
	}
	spec, ok := d.params(t, &t.Params, alg)
	if !ok {
		return l, false
	}
	l.Limit, _ = spec.Build()
	return l, d.overrides(t, l.Limit.Algorithm(), &l)
}

// params reads a limit's parameters into a bucket.Spec of the algorithm
// alg, which bucket's Build must accept; its problems are reported at
// the fields they name, in p's holder.
func (d *decoder) params(holder any, p *Params, alg string) (bucket.Spec, bool) {
	spec := bucket.Spec{Algorithm: alg, NoDelay: p.NoDelay.V, Burst: p.Burst.V, Delay: p.Delay.V, Limit: p.Limit.V}
	ok := p.Rate.err == nil && p.NoDelay.err == nil && p.Window.err == nil
	for _, i := range []*integer{&p.Burst, &p.Delay, &p.Limit} {
		if i.notInt {
			d.errorf(i, "expected an integer, got %s", yamlpos.Describe(i.n))
			ok = false
		}
	}
	if !ok {
		return spec, false
	}
	spec.Rate, spec.Window = p.Rate.text(), p.Window.text()
	_, err := spec.Build()
	le, isLimit := errors.AsType[*bucket.LimitError](err)
	var f leafer
	if isLimit {
		f = byTag(reflect.ValueOf(p).Elem(), le.Field)
	}
	switch {
	case err == nil:
	case f == nil:
		d.errorf(holder, "%v", err)
	case !f.base().given() && le.Want != "":
		d.missing(f, le.Want)
	case le.Value != "":
		d.errorf(f, "%s, got %s", le.Reason, le.Value)
	default:
		d.errorf(f, "%s", le.Reason)
	}
	return spec, err == nil
}

// overrides reads a tier's overrides into l.Overrides: each a key or
// prefix, given once, and parameters of the tier's algorithm, validated
// as the tier's own are.
func (d *decoder) overrides(t *limitDoc, alg bucket.Algorithm, l *Limit) bool {
	if len(t.Overrides) > 0 && l.Key.Kind == KeyGlobal {
		d.errorf(&t.Overrides, "a global tier has one key, which its own parameters limit: overrides apply to header:NAME and ip tiers")
		return false
	}
	var list []overrides.Override
	seen := map[overrides.Pattern]int{} // → line
	ok := true
	for _, o := range t.Overrides {
		if o == nil || !d.placed(o) {
			ok = false
			continue
		}
		var s string
		var p overrides.Pattern
		var err error
		if d.need(&o.Key, wantPattern) && d.str(&o.Key, &s, nil) {
			if p, err = overrides.ParsePattern(s); err != nil {
				d.errorf(&o.Key, "%v", err)
			} else if line, dup := seen[p]; dup {
				d.errorf(&o.Key, "key %.80q is already overridden at line %d", s, line)
				err = errors.New("duplicate")
			} else {
				seen[p] = o.Key.n.Line
			}
		}
		spec, sok := d.params(o, &o.Params, alg.String())
		if !sok || err != nil || !o.Key.given() {
			ok = false
			continue
		}
		built, _ := spec.Build()
		list = append(list, overrides.Override{Pattern: p, Limit: built, Source: overrides.SourceConfig, Line: d.pos[o].line,
			Params: overrides.Params{Rate: spec.Rate, Burst: spec.Burst, Delay: spec.Delay, NoDelay: spec.NoDelay, Limit: spec.Limit, Window: spec.Window}})
	}
	l.Overrides = overrides.NewTable(list)
	return ok
}

// backlog reads a queue's backlog and ready sections into a queue.Config,
// and queue's ValidateGiven decides what may be used. A backlog needs a
// leak rate: the worker refuses a queue whose backlog would never drain.
func (d *decoder) backlog(q *queueDoc, name string, replicas int) queue.Config {
	b := &q.Backlog
	cfg := queue.Config{
		Name:            name,
		Capacity:        queue.DefaultCapacity,
		ReadyCapacity:   queue.DefaultReadyCapacity,
		Replicas:        replicas,
		DuplicateWindow: queue.DefaultDuplicateWindow,
		MaxDelay:        queue.DefaultMaxDelay,
	}
	b.Capacity.into(&cfg.Capacity)
	b.PerKeyCapacity.into(&cfg.PerKeyCapacity)
	q.Ready.Capacity.into(&cfg.ReadyCapacity)
	b.MaxAge.into(&cfg.MaxAge)
	b.MaxDelay.into(&cfg.MaxDelay)
	b.DuplicateWindow.into(&cfg.DuplicateWindow)
	lr := &b.LeakRate
	switch {
	case !lr.isShort && !lr.Max.given() && !lr.Adaptive.given():
		d.missing(lr, `a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one`)
	case !lr.isShort && !lr.Max.given():
		d.missing(&lr.Max, `the most backlog jobs that start per unit of time, a rate such as "50/s"`)
	}
	cfg.LeakRate = lr.Max.V
	d.boolean(&lr.Adaptive, &cfg.Adaptive)
	var scope string
	if d.str(&b.Pushback, &scope, oneOf(queue.PushbackQueue, queue.PushbackKey)) {
		cfg.Pushback = queue.PushbackScope(scope)
	}

	f := &b.Fairness
	cfg.Fairness.MinShare = f.MinShare.V // NaN when it is not a number: refused by queue
	weights := d.weights(f, &cfg.Fairness)
	d.owned(cfg.ValidateGiven(), func(name string) leafer {
		switch {
		case name == "ready_capacity":
			return &q.Ready.Capacity
		case strings.HasPrefix(name, "fairness.weights"):
			return weights[name]
		}
		return byTag(reflect.ValueOf(b).Elem(), name)
	})
	return cfg
}

// weights reads fairness.weights into f, the rules in the order
// queue.Fairness.WeightOf wants, and returns each rule's leaf by the name
// queue gives it (fairness.weights["KEY"]).
//
// weights maps a key, or a prefix ending in * ("*" alone: every key), to
// its weight. YAML mappings have no order, so the rules are sorted, most
// specific first — exact keys (by key), then prefixes from the longest —
// and the result depends on the rules, not on how the file lists them.
func (d *decoder) weights(fd *fairnessDoc, f *queue.Fairness) map[string]leafer {
	leaves := map[string]leafer{}
	first := map[string]int{}
	d.entries(&fd.Weights, "a mapping of keys (or prefixes ending in *) to weights", "a key or a prefix ending in *",
		func(k, v *yaml.Node, path string) {
			line, dup := first[k.Value]
			switch {
			case dup:
				d.add(atNode(path, k), fmt.Sprintf("given twice (first at line %d)", line))
				return
			case k.Value == "":
				d.add(atNode(path, k), `expected a key, or a prefix ending in * ("*" alone: every key)`)
				return
			}
			first[k.Value] = k.Line
			r := queue.WeightRule{KeyPattern: queue.KeyPattern{Key: k.Value}, Weight: -1} // -1: refused by queue
			r.Key, r.Prefix = strings.CutSuffix(k.Value, "*")
			if v.Kind == yaml.ScalarNode {
				if w, err := yamlpos.Int(v); err == nil {
					r.Weight = int(min(max(w, -1), queue.MaxWeight+1))
				}
			}
			l := &leaf{n: v}
			d.pos[l] = atNode(path, v)
			leaves[fmt.Sprintf("fairness.weights[%q]", r.String())] = l
			f.Weights = append(f.Weights, r)
		})
	slices.SortFunc(f.Weights, func(a, b queue.WeightRule) int {
		if a.Prefix != b.Prefix {
			if a.Prefix {
				return 1
			}
			return -1
		}
		if a.Prefix && len(a.Key) != len(b.Key) {
			return len(b.Key) - len(a.Key)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return leaves
}

// entries calls fn with each entry of the mapping e whose key is a
// scalar: the key, the value (aliases followed; the null node for a null)
// and the entry's path. want is what e must be, wantKey what a key must
// be.
func (d *decoder) entries(e *entries, want, wantKey string, fn func(k, v *yaml.Node, path string)) {
	n := yamlpos.Deref(e.n)
	if n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(e, "expected %s, got %s", want, yamlpos.Describe(n))
		return
	}
	path := d.pos[e].path
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlpos.Deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.add(atNode(path, n.Content[i]), fmt.Sprintf("expected %s, got %s", wantKey, yamlpos.Describe(k)))
			continue
		}
		if yamlpos.Deref(v) != nil {
			v = yamlpos.Deref(v)
		}
		fn(k, v, fmt.Sprintf("%s[%q]", path, k.Value))
	}
}

// retry reads a queue's retry section into a retry.Policy, and retry's
// ValidateGiven decides what may be used.
func (d *decoder) retry(r *retryDoc) retry.Policy {
	p := retry.Policy{MaxAttempts: retry.DefaultMaxAttempts, Initial: retry.DefaultInitial, Max: retry.DefaultMax, Jitter: retry.DefaultJitter}
	if r.MaxAttempts.given() {
		p.MaxAttempts = int(max(-1, min(r.MaxAttempts.V, maxInt)))
	}
	r.Initial.into(&p.Initial)
	r.Max.into(&p.Max)
	if r.Jitter.given() {
		p.Jitter = r.Jitter.V
	}
	d.owned(p.ValidateGiven(), func(name string) leafer { return byTag(reflect.ValueOf(r).Elem(), name) })
	if p.Jitter == 0 {
		p.Jitter = -1 // retry.Policy: 0 is the default, negative is none
	}
	return p
}

// handler reads a queue's handler, exactly one of http, nats and log:
// true, and handler's Validate decides what may be used.
func (d *decoder) handler(hd *handlerDoc) handler.Config {
	var h handler.Config
	var kinds []string
	leaves := map[string]leafer{}
	if hh := hd.HTTP; hh != nil {
		kinds = append(kinds, "http")
		h.HTTP = &handler.HTTPConfig{Timeout: handler.DefaultTimeout}
		d.str(&hh.URL, &h.HTTP.URL, nil)
		d.duration(&hh.Timeout, &h.HTTP.Timeout, true)
		h.HTTP.Headers = d.headers(&hh.Headers, leaves)
		leaves["http.url"] = &hh.URL
	}
	if nh := hd.NATS; nh != nil {
		kinds = append(kinds, "nats")
		h.NATS = &handler.NATSConfig{Timeout: handler.DefaultTimeout}
		d.str(&nh.Subject, &h.NATS.Subject, nil)
		d.duration(&nh.Timeout, &h.NATS.Timeout, true)
		leaves["nats.subject"] = &nh.Subject
	}
	if d.boolean(&hd.Log, &h.Log) && h.Log {
		kinds = append(kinds, "log")
	}
	switch len(kinds) {
	case 0:
		d.errorf(hd, "expected one of http, nats or log: true (leave handler out for an admit-only queue)")
	case 1:
	default:
		d.errorf(hd, "expected one kind of handler, got %s", yamlpos.JoinOr(kinds, "and"))
	}
	for _, e := range unjoin(h.Validate()) {
		fe, _ := errors.AsType[*handler.FieldError](e)
		d.blame(leaves[fe.Field], fe.Want, fe.Problem())
	}
	return h
}

// headers reads an HTTP handler's headers, by canonical name, each given
// once; leaves gets each header's key by its field in handler's problems.
func (d *decoder) headers(e *entries, leaves map[string]leafer) map[string]string {
	if e.n == nil {
		return nil
	}
	headers := map[string]string{}
	first := map[string]int{}
	d.entries(e, "a mapping of header names to values", "a header name", func(k, v *yaml.Node, _ string) {
		field := d.pos[e].path + "." + k.Value
		name := textproto.CanonicalMIMEHeaderKey(k.Value)
		if line, dup := first[name]; dup {
			d.add(atNode(field, k), fmt.Sprintf("header %s is already given at line %d", name, line))
			return
		}
		first[name] = k.Line
		if yamlpos.IsNull(v) || v.Kind != yaml.ScalarNode {
			d.add(atNode(field, v), "expected a header value, got "+yamlpos.Describe(v))
			return
		}
		l := &leaf{n: k}
		d.pos[l] = atNode(field, k)
		leaves["http.headers."+name] = l
		headers[name] = v.Value
	})
	return headers
}

// redis reads redis.url, redis.sentinel, redis.cluster and their
// credentials and TLS into c, and conn's Validate decides what may be
// used: its problems are placed at the fields they name.
func (d *decoder) redis(r *redisDoc, c *Redis) {
	rc := &c.RedisConfig
	d.str(&r.URL, &rc.URL, nil)
	where := map[string]any{"redis.url": &r.URL} // what byTag does not find
	if s := r.Sentinel; s != nil {
		rc.Sentinel = &conn.RedisSentinel{Addrs: d.addrs(&s.Addrs, "redis.sentinel.addrs", where)}
		d.str(&s.MasterName, &rc.Sentinel.MasterName, nil)
		d.str(&s.Username, &rc.Sentinel.Username, nil)
		d.str(&s.Password, &rc.Sentinel.Password, nil)
		where["redis.sentinel"] = s
	}
	if cl := r.Cluster; cl != nil {
		rc.Cluster = &conn.RedisCluster{Addrs: d.addrs(&cl.Addrs, "redis.cluster.addrs", where)}
		where["redis.cluster"] = cl
	}
	d.str(&r.Username, &rc.Username, nil)
	d.str(&r.Password, &rc.Password, nil)
	if t := r.TLS; t != nil {
		rc.TLS = &conn.RedisTLS{}
		d.filename(&t.CAFile, &rc.TLS.CAFile)
		d.filename(&t.CertFile, &rc.TLS.CertFile)
		d.filename(&t.KeyFile, &rc.TLS.KeyFile)
		d.str(&t.ServerName, &rc.TLS.ServerName, nil)
		where["redis.tls"] = t
	}
	var mode string
	if d.str(&r.FailureMode, &mode, oneOf(FailOpen, FailClosed, FailLocal)) {
		c.FailureMode = FailureMode(mode)
	}
	r.Timeout.into(&rc.Timeout)
	for _, e := range unjoin(rc.Validate()) {
		fe, _ := errors.AsType[*conn.FieldError](e)
		p, ok := where[fe.Field]
		if !ok {
			p = byTag(reflect.ValueOf(r).Elem(), strings.TrimPrefix(fe.Field, "redis."))
		}
		switch other, conflict := d.pos[where[fe.Other]]; {
		case fe.Other == "redis.url" && other.src != "":
			d.errorf(&r.URL, "the file configures redis.sentinel or redis.cluster: a URL would replace them; change the file instead")
		case conflict:
			d.errorf(p, "%s (line %d)", fe.Problem(), other.line)
		default:
			d.blame(p, fe.Want, fe.Problem())
		}
	}
}

// addrs reads a list of host:port addresses, one string per item (""
// for an item that is not a string, which is reported) so that conn's
// problems name the file's items; where gets the list and each item by
// its field.
func (d *decoder) addrs(list *[]*text, field string, where map[string]any) []string {
	where[field] = list
	if *list == nil {
		return nil
	}
	out := make([]string, len(*list))
	for i, item := range *list {
		if item == nil || item.n.Kind != yaml.ScalarNode {
			d.errorf(&(*list)[i], "expected %s, got %s", conn.WantRedisAddr, yamlpos.Describe(item.node()))
			continue
		}
		out[i] = item.n.Value
		where[fmt.Sprintf("%s[%d]", field, i)] = item
	}
	return out
}

// list reads a list of strings, each a scalar that check accepts: want
// says what an item is.
func (d *decoder) list(items []*text, want string, check func(string) error) []string {
	var out []string
	for i, item := range items {
		var s string
		if item == nil || item.n.Kind != yaml.ScalarNode {
			d.errorf(&items[i], "expected %s, got %s", want, yamlpos.Describe(item.node()))
		} else if d.str(item, &s, check) {
			out = append(out, s)
		}
	}
	return out
}
