package config

import (
	"cmp"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/yamlpos"
)

// The file's shape (docs/configuration.md): one struct per mapping, filled
// from yaml.v3's node tree by place, unknown fields refused. Each yaml tag
// is the one place a setting's name is written: paths in messages are
// built from the tags, and the owners' field names (queue, retry, bucket)
// are found by them; a list's list tag names its items in messages.
// Leaves (leaf.go) keep their node, so that every problem has its line.
type (
	rootDoc struct {
		NATS   natsDoc     `yaml:"nats"`
		Redis  redisDoc    `yaml:"redis"`
		HTTP   httpDoc     `yaml:"http"`
		Worker workerDoc   `yaml:"worker"`
		Status statusDoc   `yaml:"status"`
		Queues []*queueDoc `yaml:"queues" list:"queues"`
	}
	natsDoc struct {
		URL         text    `yaml:"url"`
		Listen      text    `yaml:"listen"`
		StoreDir    text    `yaml:"store_dir"`
		CredsFile   text    `yaml:"creds_file"`
		NkeyFile    text    `yaml:"nkey_file"`
		InboxPrefix text    `yaml:"inbox_prefix"`
		Replicas    integer `yaml:"replicas"`
		// ReplyPrefix: where the NATS door answers.
		ReplyPrefix text `yaml:"reply_prefix"`
	}
	redisDoc struct {
		URL         text              `yaml:"url"`
		Sentinel    *redisSentinelDoc `yaml:"sentinel"`
		Cluster     *redisClusterDoc  `yaml:"cluster"`
		Username    text              `yaml:"username"`
		Password    text              `yaml:"password"`
		TLS         *redisTLSDoc      `yaml:"tls"`
		FailureMode text              `yaml:"failure_mode"`
		Timeout     duration          `yaml:"timeout"`
	}
	redisSentinelDoc struct {
		MasterName text    `yaml:"master_name"`
		Addrs      []*text `yaml:"addrs" list:"host:port addresses"`
		Username   text    `yaml:"username"`
		Password   text    `yaml:"password"`
	}
	redisClusterDoc struct {
		Addrs []*text `yaml:"addrs" list:"host:port addresses"`
	}
	redisTLSDoc struct {
		CAFile     text `yaml:"ca_file"`
		CertFile   text `yaml:"cert_file"`
		KeyFile    text `yaml:"key_file"`
		ServerName text `yaml:"server_name"`
	}
	httpDoc struct {
		Listen           text     `yaml:"listen"`
		MaxBodyBytes     integer  `yaml:"max_body_bytes"`
		MaxInflightBytes integer  `yaml:"max_inflight_bytes"`
		WriteTimeout     duration `yaml:"write_timeout"`
		APIKeysFile      text     `yaml:"api_keys_file"`
		AdminKeysFile    text     `yaml:"admin_keys_file"`
		TrustedProxies   []*text  `yaml:"trusted_proxies" list:"IP addresses or CIDR prefixes"`
		ShowRawKeys      boolean  `yaml:"show_raw_keys"`
	}
	workerDoc struct {
		Concurrency integer  `yaml:"concurrency"`
		GracePeriod duration `yaml:"grace_period"`
		AckWait     duration `yaml:"ack_wait"`
	}
	statusDoc struct {
		TTL           duration `yaml:"ttl"`
		RecordRunning boolean  `yaml:"record_running"`
	}
	queueDoc struct {
		Name    text        `yaml:"name"`
		Limits  []*limitDoc `yaml:"limits" list:"limit tiers"`
		Backlog backlogDoc  `yaml:"backlog"`
		Ready   readyDoc    `yaml:"ready"`
		Retry   retryDoc    `yaml:"retry"`
		Handler *handlerDoc `yaml:"handler"`
		// Concurrency: docs/design.md#per-key-concurrency (concurrency.go).
		Concurrency []*concurrencyDoc `yaml:"concurrency" list:"concurrency entries"`
	}
	limitDoc struct {
		Key       text `yaml:"key"`
		Algorithm text `yaml:"algorithm"`
		Params    `yaml:",inline"`
		Name      text           `yaml:"name"`
		OnMissing text           `yaml:"on_missing"`
		Mode      text           `yaml:"mode"`
		Overrides []*overrideDoc `yaml:"overrides" list:"overrides"`
	}
	// overrideDoc is one of a tier's overrides: a key or prefix and the
	// tier's algorithm's parameters (docs/design.md#per-key-overrides).
	overrideDoc struct {
		Key    text `yaml:"key"`
		Params `yaml:",inline"`
	}
	// Params are a limit's parameters, in a tier or an override; their
	// names are bucket.Spec's.
	Params struct {
		Rate    rate     `yaml:"rate"`
		Burst   integer  `yaml:"burst"`
		Delay   integer  `yaml:"delay"`
		NoDelay boolean  `yaml:"nodelay"`
		Limit   integer  `yaml:"limit"`
		Window  duration `yaml:"window"`
	}
	backlogDoc struct {
		Capacity        integer     `yaml:"capacity"`
		PerKeyCapacity  integer     `yaml:"per_key_capacity"`
		LeakRate        leakRateDoc `yaml:"leak_rate"`
		MaxAge          duration    `yaml:"max_age"`
		MaxDelay        duration    `yaml:"max_delay"`
		DuplicateWindow duration    `yaml:"duplicate_window"`
		Fairness        fairnessDoc `yaml:"fairness"`
		Pushback        text        `yaml:"pushback"`
	}
	// leakRateDoc is leak_rate: a rate, or the mapping {max: 100/s,
	// adaptive: true} (docs/design.md#pushback).
	leakRateDoc struct {
		Max      rate    `yaml:"max"`
		Adaptive boolean `yaml:"adaptive"`
		isShort  bool    // written as a rate alone: Max holds it
	}
	// fairnessDoc is how a backlog's leak is shared among keys and
	// priority classes (docs/design.md#fair-drain).
	fairnessDoc struct {
		Weights  entries `yaml:"weights"`
		MinShare share   `yaml:"min_share"`
	}
	readyDoc struct {
		Capacity integer `yaml:"capacity"`
	}
	retryDoc struct {
		MaxAttempts integer  `yaml:"max_attempts"`
		Initial     duration `yaml:"initial"`
		Max         duration `yaml:"max"`
		Jitter      number   `yaml:"jitter"`
	}
	handlerDoc struct {
		HTTP *httpHandlerDoc `yaml:"http"`
		NATS *natsHandlerDoc `yaml:"nats"`
		Log  boolean         `yaml:"log"`
	}
	httpHandlerDoc struct {
		URL     text     `yaml:"url"`
		Timeout duration `yaml:"timeout"`
		Headers entries  `yaml:"headers"`
	}
	natsHandlerDoc struct {
		Subject text     `yaml:"subject"`
		Timeout duration `yaml:"timeout"`
	}
)

// maxProblems bounds the problems reported for one file; the rest are
// counted. A real file has a few; thousands mean it is not a config file.
const maxProblems = 100

// at is where a value is, or would be when it is absent: its path and
// line in the file (its holder's line when absent), or src, the
// environment or flags, and the variable or setting that gave it.
type at struct {
	path      string
	line, col int
	src       string // "" for the file
}

// decoder reads a YAML document into a Config, collecting every problem.
type decoder struct {
	file  string // the file name as given, for every FieldError
	dir   string // relative paths in the file are relative to this directory
	errs  []problem
	pos   map[any]at
	open  []*yaml.Node        // the collections being placed, to catch an alias to one of them
	keyed map[*yaml.Node]bool // keys already reported: an alias places a mapping again
}

type problem struct {
	*FieldError
	at at
}

// parse reads a configuration file's bytes into a Config with defaults
// filled, then applies the environment (getenv; nil for none) and the
// overrides o. name is the file name that problems carry. Problems are
// in line order, then the environment's, then the flags'; the Config is
// meaningful only when there are none.
func parse(name string, data []byte, getenv func(string) string, o Overrides) (*Config, []*FieldError) {
	d := &decoder{file: name, dir: filepath.Dir(name), pos: map[any]at{}, keyed: map[*yaml.Node]bool{}}
	c := defaults()
	var doc rootDoc
	root, bad := yamlpos.Parse(data)
	if bad != nil {
		d.add(at{line: bad.Line}, bad.Msg)
	}
	if bad == nil && d.decode(root, &doc) {
		if getenv != nil {
			d.override(&doc, getenv, nil)
		}
		d.config(c, &doc)
		if o != (Overrides{}) {
			// Once more with the flags, which may override what the
			// environment got wrong: that is reported all the same.
			n := len(d.errs)
			d.override(&doc, nil, &o)
			c = defaults()
			d.config(c, &doc)
			d.errs = append(d.errs[:n], slices.DeleteFunc(d.errs[n:], func(p problem) bool { return p.at.src != SourceFlags })...)
		}
	}
	c.Source = name
	rank := map[string]int{"": 0, SourceEnv: 1, SourceFlags: 2}
	slices.SortStableFunc(d.errs, func(a, b problem) int {
		return cmp.Or(rank[a.at.src]-rank[b.at.src], a.at.line-b.at.line, cmp.Compare(a.at.col, b.at.col))
	})
	var errs []*FieldError
	for _, p := range d.errs {
		if len(errs) == maxProblems {
			errs = append(errs, &FieldError{Source: name, Problem: fmt.Sprintf("%d more problems not shown", len(d.errs)-maxProblems)})
			break
		}
		errs = append(errs, p.FieldError)
	}
	return c, errs
}

// decode reads the document root into doc (place) and reports false when
// nothing more can be read.
func (d *decoder) decode(root *yaml.Node, doc *rootDoc) (ok bool) {
	defer func() { // yaml.v3 decodes integers, on whatever the file holds
		if r := recover(); r != nil {
			d.add(at{}, fmt.Sprintf("the YAML parser failed: %v", r))
			ok = false
		}
	}()
	d.place(reflect.ValueOf(doc).Elem(), root, at{line: 1, col: 1})
	if len(d.pos) > yamlpos.MaxValues {
		d.errs = nil // the rest of the walk was skipped: its problems would mislead
		d.add(at{}, yamlpos.TooManyValues)
		return false
	}
	return true
}

// place walks doc (v, a value of a mapping struct) and its node n
// together, as yaml.v3 would decode one into the other with unknown
// fields refused: it fills v, records where each value is or would be
// (d.pos, by its address), and reports leaves' syntax, values of the
// wrong kind for a mapping or a list, unknown fields and keys given
// twice. A mapping reported as wrong is not placed: a rule that looks for
// its fields' place finds none and stays quiet, so that one mistake is
// one problem.
func (d *decoder) place(v reflect.Value, n *yaml.Node, a at) {
	alias := n
	if n = yamlpos.Deref(n); n != nil && !yamlpos.IsNull(n) {
		a.line, a.col = n.Line, n.Column
	} else {
		n = nil
	}
	if len(d.pos) > yamlpos.MaxValues {
		return
	}
	if alias != nil && alias.Kind == yaml.AliasNode && slices.Contains(d.open, n) {
		d.add(atNode(a.path, alias), yamlpos.SelfAlias(alias.Value))
		return
	}
	p := v.Addr().Interface()
	d.pos[p] = a
	if l, ok := p.(leafer); ok {
		if n != nil {
			_ = p.(yaml.Unmarshaler).UnmarshalYAML(n)
		}
		if err := l.base().err; err != nil {
			d.add(a, err.Error())
		}
		return
	}
	if n != nil {
		d.open = append(d.open, n)
		defer func() { d.open = d.open[:len(d.open)-1] }()
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n != nil {
			v.Set(reflect.New(v.Type().Elem()))
			if d.place(v.Elem(), n, a); !d.placed(v.Interface()) {
				v.SetZero()
			}
		}
	case reflect.Slice:
		d.placeItems(v, n, a)
	case reflect.Struct:
		if s, ok := p.(shortForm); ok && n != nil && n.Kind == yaml.ScalarNode {
			s.short()
			d.place(v.Field(0), n, a)
			return
		}
		if n != nil && n.Kind != yaml.MappingNode {
			delete(d.pos, p)
			want := "a mapping of " + yamlpos.JoinOr(yamlpos.FieldNames(v.Type()), "and")
			if s, ok := p.(shortForm); ok {
				want = s.shortWant() + ", or " + want
			}
			d.add(a, fmt.Sprintf("expected %s, got %s", want, yamlpos.Describe(n)))
			return
		}
		if n != nil && d.keyProblems(v.Type(), n, a) {
			delete(d.pos, p)
			return
		}
		d.fields(v, n, a)
	}
}

// fields places the fields of v, a mapping struct, from mapping n.
func (d *decoder) fields(v reflect.Value, n *yaml.Node, a at) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		fa := at{path: join(a.path, name), line: a.line, col: a.col}
		switch fn := yamlpos.Deref(yamlpos.Lookup(n, name)); {
		case f.Anonymous:
			d.pos[v.Field(i).Addr().Interface()] = a
			d.fields(v.Field(i), n, a)
		case name == "":
		case f.Type.Kind() == reflect.Slice && !yamlpos.IsNull(fn) && fn.Kind != yaml.SequenceNode:
			d.add(atNode(fa.path, fn), fmt.Sprintf("expected a list of %s, got %s", f.Tag.Get("list"), yamlpos.Describe(fn)))
		default:
			d.place(v.Field(i), yamlpos.Lookup(n, name), fa)
		}
	}
}

func (d *decoder) placed(p any) bool {
	_, ok := d.pos[p]
	return ok
}

// placeItems places the items of list n in v, a slice of pointers: nil
// for an item that is null, or that is not a mapping where a mapping is
// expected, which is reported.
func (d *decoder) placeItems(v reflect.Value, n *yaml.Node, a at) {
	if n == nil {
		return
	}
	elem := v.Type().Elem().Elem()
	isLeaf := reflect.PointerTo(elem).Implements(leafType)
	v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
	for i, raw := range n.Content {
		item := yamlpos.Deref(raw)
		if item == nil {
			continue
		}
		ia := atNode(fmt.Sprintf("%s[%d]", a.path, i), item)
		switch {
		case isLeaf || item.Kind == yaml.MappingNode:
			d.place(v.Index(i), raw, ia)
		case yamlpos.IsNull(item):
			d.add(ia, fmt.Sprintf("expected %s (a mapping of %s), got nothing", itemNoun[elem.Name()], yamlpos.JoinOr(yamlpos.FieldNames(elem), "and")))
		default:
			d.add(ia, fmt.Sprintf("expected a mapping of %s, got %s", yamlpos.JoinOr(yamlpos.FieldNames(elem), "and"), yamlpos.Describe(item)))
		}
	}
}

// itemNoun names an item of a list of mappings, for "got nothing".
var itemNoun = map[string]string{"queueDoc": "a queue", "limitDoc": "a limit tier", "overrideDoc": "an override"}

// keyProblems reports the problems with the keys of mapping n and those
// it merges, which a struct of type t reads: those yamlpos.MappingProblems
// finds, and a key unknown to t. A key given twice in one mapping leaves
// n unread (as yaml.v3 does), reported true.
func (d *decoder) keyProblems(t reflect.Type, n *yaml.Node, a at) (unread bool) {
	unread = yamlpos.MappingProblems(n, d.open[:len(d.open)-1], func(at *yaml.Node, key, problem string) {
		path := a.path
		if key != "" {
			path = join(path, key)
		}
		d.keyProblem(at, path, problem)
	})
	known := yamlpos.FieldNames(t)
	yamlpos.Pairs(n, func(k, _ *yaml.Node) {
		switch {
		case yamlpos.IsNull(yamlpos.Deref(k)) || yamlpos.Deref(k).Kind != yaml.ScalarNode || k.Value == "":
			d.keyProblem(k, a.path, "expected a field name, got "+yamlpos.Describe(yamlpos.Deref(k)))
		case a.path == "" && strings.HasPrefix(k.Value, "x-"):
			// an extension field: a place for anchors, as in Compose files
		case !slices.Contains(known, k.Value):
			d.keyProblem(k, join(a.path, k.Value), "unknown field"+yamlpos.UnknownHint(k.Value, t))
		}
	})
	return unread
}

// keyProblem reports a problem of key (or merge) node k once, however
// many times aliases place its mapping.
func (d *decoder) keyProblem(k *yaml.Node, path, problem string) {
	if !d.keyed[k] {
		d.keyed[k] = true
		d.add(atNode(path, k), problem)
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// atNode is the place of node n, at path.
func atNode(path string, n *yaml.Node) at { return at{path: path, line: n.Line, col: n.Column} }

// add reports a problem at a.
func (d *decoder) add(a at, msg string) {
	d.errs = append(d.errs, problem{&FieldError{Source: cmp.Or(a.src, d.file), Line: a.line, Field: a.path, Problem: msg}, a})
}
