package config

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// The file's shape (docs/design.md#configuration): one struct per mapping,
// its yaml tags the mapping's fields in the order messages list them. A
// section[T] is a nested mapping and a list[T] a list of them; both name
// their fields when a field is written one level too high ("leak_rate"
// directly in a queue). Leaves are fields: the nodes themselves, so that
// every problem has its line, and the values are read by the rules that
// own them (bucket, queue and retry for limits, backlogs and retries).
type (
	rootDoc struct {
		NATS   section[natsDoc]   `yaml:"nats"`
		Redis  section[redisDoc]  `yaml:"redis"`
		HTTP   section[httpDoc]   `yaml:"http"`
		Worker section[workerDoc] `yaml:"worker"`
		Status section[statusDoc] `yaml:"status"`
		Queues field              `yaml:"queues"`
	}
	natsDoc struct {
		URL       field `yaml:"url"`
		Listen    field `yaml:"listen"`
		StoreDir  field `yaml:"store_dir"`
		CredsFile field `yaml:"creds_file"`
		Replicas  field `yaml:"replicas"`
	}
	redisDoc struct {
		URL         field                     `yaml:"url"`
		Sentinel    section[redisSentinelDoc] `yaml:"sentinel"`
		Cluster     section[redisClusterDoc]  `yaml:"cluster"`
		Username    field                     `yaml:"username"`
		Password    field                     `yaml:"password"`
		TLS         section[redisTLSDoc]      `yaml:"tls"`
		FailureMode field                     `yaml:"failure_mode"`
		Timeout     field                     `yaml:"timeout"`
	}
	redisSentinelDoc struct {
		MasterName field `yaml:"master_name"`
		Addrs      field `yaml:"addrs"`
		Username   field `yaml:"username"`
		Password   field `yaml:"password"`
	}
	redisClusterDoc struct {
		Addrs field `yaml:"addrs"`
	}
	redisTLSDoc struct {
		CAFile     field `yaml:"ca_file"`
		CertFile   field `yaml:"cert_file"`
		KeyFile    field `yaml:"key_file"`
		ServerName field `yaml:"server_name"`
	}
	httpDoc struct {
		Listen         field `yaml:"listen"`
		MaxBodyBytes   field `yaml:"max_body_bytes"`
		APIKeysFile    field `yaml:"api_keys_file"`
		AdminKeysFile  field `yaml:"admin_keys_file"`
		TrustedProxies field `yaml:"trusted_proxies"`
		ShowRawKeys    field `yaml:"show_raw_keys"`
	}
	workerDoc struct {
		Concurrency field `yaml:"concurrency"`
		GracePeriod field `yaml:"grace_period"`
		AckWait     field `yaml:"ack_wait"`
	}
	statusDoc struct {
		TTL           field `yaml:"ttl"`
		RecordRunning field `yaml:"record_running"`
	}
	queueDoc struct {
		Name    field               `yaml:"name"`
		Limits  list[limitDoc]      `yaml:"limits"`
		Backlog section[backlogDoc] `yaml:"backlog"`
		Ready   section[readyDoc]   `yaml:"ready"`
		Retry   section[retryDoc]   `yaml:"retry"`
		Handler section[handlerDoc] `yaml:"handler"`
	}
	limitDoc struct {
		Key       field             `yaml:"key"`
		Algorithm field             `yaml:"algorithm"`
		Rate      field             `yaml:"rate"`
		Burst     field             `yaml:"burst"`
		Delay     field             `yaml:"delay"`
		NoDelay   field             `yaml:"nodelay"`
		Limit     field             `yaml:"limit"`
		Window    field             `yaml:"window"`
		Name      field             `yaml:"name"`
		OnMissing field             `yaml:"on_missing"`
		Mode      field             `yaml:"mode"`
		Overrides list[overrideDoc] `yaml:"overrides"`
	}
	// overrideDoc is one of a tier's overrides: a key or prefix and the
	// tier's algorithm's parameters (docs/design.md#per-key-overrides).
	overrideDoc struct {
		Key     field `yaml:"key"`
		Rate    field `yaml:"rate"`
		Burst   field `yaml:"burst"`
		Delay   field `yaml:"delay"`
		NoDelay field `yaml:"nodelay"`
		Limit   field `yaml:"limit"`
		Window  field `yaml:"window"`
	}
	backlogDoc struct {
		Capacity        field                `yaml:"capacity"`
		PerKeyCapacity  field                `yaml:"per_key_capacity"`
		LeakRate        field                `yaml:"leak_rate"`
		MaxAge          field                `yaml:"max_age"`
		MaxDelay        field                `yaml:"max_delay"`
		DuplicateWindow field                `yaml:"duplicate_window"`
		Fairness        section[fairnessDoc] `yaml:"fairness"`
	}
	// leakRateDoc is leak_rate's mapping form: {max: 100/s, adaptive: true}.
	leakRateDoc struct {
		Max      field `yaml:"max"`
		Adaptive field `yaml:"adaptive"`
	}
	readyDoc struct {
		Capacity field `yaml:"capacity"`
	}
	retryDoc struct {
		MaxAttempts field `yaml:"max_attempts"`
		Initial     field `yaml:"initial"`
		Max         field `yaml:"max"`
		Jitter      field `yaml:"jitter"`
	}
	handlerDoc struct {
		HTTP section[httpHandlerDoc] `yaml:"http"`
		NATS section[natsHandlerDoc] `yaml:"nats"`
		Log  field                   `yaml:"log"`
	}
	httpHandlerDoc struct {
		URL     field `yaml:"url"`
		Timeout field `yaml:"timeout"`
		Headers field `yaml:"headers"`
	}
	natsHandlerDoc struct {
		Subject field `yaml:"subject"`
		Timeout field `yaml:"timeout"`
	}
)

// field is one field of a mapping as the file gives it.
type field struct {
	path   string     // queues[0].backlog.leak_rate
	key    *yaml.Node // nil when the field is absent
	val    *yaml.Node // its value, aliases followed; nil when absent or null
	holder *yaml.Node // the mapping, or its parent's when absent: where a missing field is reported
	bad    bool       // the holder is not a mapping (reported): a missing field is not reported too
}

func (f *field) base() *field { return f }

// at is the node a problem with the field is reported at: its value, its
// key, or the mapping.
func (f *field) at() *yaml.Node {
	switch {
	case f.val != nil:
		return f.val
	case f.key != nil:
		return f.key
	}
	return f.holder
}

// section is a field holding a mapping of T's fields, decoded with its
// parent.
type section[T any] struct {
	field
	doc T
}

func (s *section[T]) fields() []string { return docFields(reflect.TypeFor[T]()) }
func (s *section[T]) sub() any         { return &s.doc }

// list is a field holding a list of mappings of T's fields.
type list[T any] struct{ field }

func (l *list[T]) fields() []string { return docFields(reflect.TypeFor[T]()) }

// docFields lists the yaml names of a mapping struct's fields.
func docFields(t reflect.Type) []string {
	if names, ok := fieldNames.Load(t); ok {
		return names.([]string)
	}
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Tag.Get("yaml")
	}
	fieldNames.Store(t, names)
	return names
}

// fieldNames caches docFields: reflect.Type → []string.
var fieldNames sync.Map

// maxValues bounds the values one file may hold once aliases are expanded,
// so that a small file of nested aliases cannot make Load walk billions.
const maxValues = 100_000

// maxProblems bounds the problems reported for one file; the rest are
// counted. A real file has a few; thousands mean it is not a config file.
const maxProblems = 100

// maxMergeDepth bounds nested merge keys (<<), which may refer to themselves.
const maxMergeDepth = 8

// decoder reads a YAML document into a Config, collecting every problem.
type decoder struct {
	file   string // the file name as given, for every FieldError
	dir    string // relative paths in the file are relative to this directory
	errs   []*FieldError
	more   int // problems beyond maxProblems, not kept
	budget int // values left to walk (maxValues)
}

// parse reads a configuration file's bytes into a Config with defaults
// filled. name is the file name that problems carry. Problems are in line
// order; the Config is meaningful only when there are none.
func parse(name string, data []byte) (*Config, []*FieldError) {
	d := &decoder{file: name, dir: filepath.Dir(name), budget: maxValues}
	c := defaults()
	c.Source = name
	if root, ok := d.document(data); ok {
		d.config(c, root)
	}
	slices.SortStableFunc(d.errs, func(a, b *FieldError) int { return a.Line - b.Line })
	if d.more > 0 {
		d.errs = append(d.errs, &FieldError{Source: name, Problem: fmt.Sprintf("%d more problems not shown", d.more)})
	}
	return c, d.errs
}

// defaults is the Config of an empty file.
func defaults() *Config {
	return &Config{
		NATS:   NATS{URL: DefaultNATSURL, Listen: DefaultNATSListen, Replicas: 1},
		Redis:  Redis{FailureMode: FailOpen, Timeout: DefaultStoreTimeout},
		HTTP:   HTTP{Listen: DefaultHTTPListen, MaxBodyBytes: DefaultMaxBodyBytes},
		Worker: Worker{Concurrency: worker.DefaultConcurrency, GracePeriod: DefaultGracePeriod, AckWait: DefaultAckWait},
		Status: Status{TTL: DefaultStatusTTL},
	}
}

func (d *decoder) addf(n *yaml.Node, field, format string, args ...any) {
	if len(d.errs) >= maxProblems {
		d.more++
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &FieldError{Source: d.file, Line: line, Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (d *decoder) errorf(f *field, format string, args ...any) {
	d.addf(f.at(), f.path, format, args...)
}

func (d *decoder) missing(f *field, want string) {
	if !f.bad {
		d.addf(f.holder, f.path, "missing: expected %s", want)
	}
}

// given says whether the file gives f, and reports it missing (expected
// want) if not.
func (d *decoder) given(f *field, want string) bool {
	if f.val == nil {
		d.missing(f, want)
	}
	return f.val != nil
}

// spend takes one value from the budget and reports once when it runs out.
func (d *decoder) spend() bool {
	d.budget--
	if d.budget == -1 { // kept even beyond maxProblems: it explains the rest
		d.errs = append(d.errs, &FieldError{Source: d.file,
			Problem: fmt.Sprintf("more than %d values once aliases are expanded; simplify the file", maxValues)})
	}
	return d.budget >= 0
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names what a node is, for "got …" in messages.
func describe(n *yaml.Node) string {
	if isNull(n) {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// orNode is n, or parent when n is absent.
func orNode(n, parent *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return parent
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// decode reads the mapping n into dst, a pointer to a mapping struct: it
// reports unknown and repeated fields, applies merge keys, sets every field
// of dst, given or not, and decodes its sections. n may be absent (nil or
// null): an empty mapping whose missing fields are reported at parent. It
// returns false if n is there but not a mapping (reported).
func (d *decoder) decode(n, parent *yaml.Node, path string, dst any) bool {
	v := reflect.ValueOf(dst).Elem()
	known := docFields(v.Type())
	sections := func() map[string][]string { // for hints: only when a field is unknown
		m := map[string][]string{}
		for i, name := range known {
			if s, ok := v.Field(i).Addr().Interface().(interface{ fields() []string }); ok {
				m[name] = s.fields()
			}
		}
		return m
	}
	m := &mapping{path: path, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	holder, bad := parent, false
	if n = deref(n); !isNull(n) {
		holder = n
		if n.Kind == yaml.MappingNode {
			d.collect(m, n, known, sections, 0)
		} else {
			d.addf(n, path, "expected a mapping of %s, got %s", joinOr(known, "and"), describe(n))
			bad = true
		}
	}
	for i, name := range known {
		p := v.Field(i).Addr().Interface()
		f := p.(interface{ base() *field }).base()
		*f = field{path: join(path, name), key: m.keys[name], val: m.vals[name], holder: holder, bad: bad}
		if s, ok := p.(interface{ sub() any }); ok {
			d.decode(f.val, holder, f.path, s.sub())
		}
	}
	return !bad
}

// mapping is one YAML mapping's fields by name, merge keys applied.
type mapping struct {
	path string // of the mapping: "" for the root, "queues[0].backlog"
	keys map[string]*yaml.Node
	vals map[string]*yaml.Node // the fields set to something other than null
}

// collect adds the fields of mapping n to m: its own first, then those of
// its merge keys (<<) that m does not have yet, as YAML's merge key
// specifies.
func (d *decoder) collect(m *mapping, n *yaml.Node, known []string, sections func() map[string][]string, depth int) {
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !d.spend() {
			return
		}
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.addf(n.Content[i], m.path, "expected a field name, got %s", describe(n.Content[i]))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			d.addf(k, join(m.path, name), "given twice (first at line %d)", first.Line)
			continue
		}
		seen[name] = k
		if m.path == "" && strings.HasPrefix(name, "x-") {
			continue // an extension field: a place for anchors, as in Compose files
		}
		if !slices.Contains(known, name) {
			d.addf(k, join(m.path, name), "unknown field%s", unknownHint(name, known, sections()))
			continue
		}
		if _, set := m.keys[name]; set {
			continue // given by the mapping that merges this one
		}
		m.keys[name] = k
		if v = deref(v); !isNull(v) {
			m.vals[name] = v
		}
	}
	for _, mm := range merges {
		mm = deref(mm)
		if depth >= maxMergeDepth {
			d.addf(mm, m.path, "merge keys (<<) nested more than %d deep", maxMergeDepth)
			return
		}
		items := []*yaml.Node{mm}
		if mm != nil && mm.Kind == yaml.SequenceNode {
			items = mm.Content
		}
		for _, item := range items {
			item = deref(item)
			if item == nil || item.Kind != yaml.MappingNode {
				d.addf(mm, m.path, "expected a mapping or a list of mappings to merge (<<), got %s", describe(mm))
				break
			}
			d.collect(m, item, known, sections, depth+1)
		}
	}
}

// unknownHint says what an unknown field may have meant: a close name, or
// the section it belongs to, or else the fields allowed here.
func unknownHint(name string, known []string, sections map[string][]string) string {
	if s := suggest(name, known); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	var under []string
	for _, section := range known {
		if slices.Contains(sections[section], name) {
			under = append(under, section)
		}
	}
	if len(under) > 0 {
		return fmt.Sprintf("; %s belongs under %s", name, joinOr(under, "or"))
	}
	return "; expected one of " + joinOr(known, "or")
}

// joinOr joins words as "a, b or c" (or "a, b and c").
func joinOr(words []string, conj string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}

// items reads a list field, its items with aliases followed, reporting a
// value that is not a list.
func (d *decoder) items(f *field, want string) []*yaml.Node {
	if f.val == nil {
		return nil
	}
	if f.val.Kind != yaml.SequenceNode {
		d.errorf(f, "expected a list of %s, got %s", want, describe(f.val))
		return nil
	}
	items := make([]*yaml.Node, 0, len(f.val.Content))
	for _, item := range f.val.Content {
		if !d.spend() {
			break
		}
		items = append(items, deref(item))
	}
	return items
}

// scalar is the text of f when it is given and a scalar; a list or a
// mapping is reported as not being want.
func (d *decoder) scalar(f *field, want string) (string, bool) {
	if f.val == nil {
		return "", false
	}
	if f.val.Kind != yaml.ScalarNode {
		d.errorf(f, "expected %s, got %s", want, describe(f.val))
		return "", false
	}
	return f.val.Value, true
}

// str stores f in dst if it is given and check accepts it.
func (d *decoder) str(f *field, dst *string, check func(string) error) bool {
	s, ok := d.scalar(f, "a string")
	if !ok {
		return false
	}
	if check != nil {
		if err := check(s); err != nil {
			d.errorf(f, "%v", err)
			return false
		}
	}
	*dst = s
	return true
}

// filename is str for a file name: relative to the configuration file's
// directory.
func (d *decoder) filename(f *field, dst *string) {
	if d.str(f, dst, nil) && *dst != "" && !filepath.IsAbs(*dst) {
		*dst = filepath.Join(d.dir, *dst)
	}
}

// integer reads f as an integer (1_000 and 0x10 as YAML writes them). want
// is what a problem says was expected.
func (d *decoder) integer(f *field, want string) (int64, bool) {
	s, ok := d.scalar(f, want)
	if !ok {
		return 0, false
	}
	n, err := yamlInt(f.val)
	if err != nil {
		d.errorf(f, "%v", expected(want, s))
		return 0, false
	}
	return n, true
}

// ranged stores f in dst if it is an integer from lo to hi: a setting
// whose range is the configuration's own.
func (d *decoder) ranged(f *field, dst *int64, lo, hi int64) {
	want := intRange(lo, hi)
	if n, ok := d.integer(f, want); ok && n >= lo && n <= hi {
		*dst = n
	} else if ok {
		d.errorf(f, "%v", expected(want, f.val.Value))
	}
}

func (d *decoder) duration(f *field, dst *time.Duration, positive bool) bool {
	s, ok := d.scalar(f, wantDuration)
	if !ok {
		return false
	}
	v, err := parseDuration(s, positive)
	if err != nil {
		d.errorf(f, "%v", err)
		return false
	}
	*dst = v
	return true
}

func (d *decoder) rate(f *field, dst *bucket.Rate) bool {
	s, ok := d.scalar(f, wantRate)
	if !ok {
		return false
	}
	r, err := parseRate(s)
	if err != nil {
		d.errorf(f, "%v", err)
		return false
	}
	*dst = r
	return true
}

// leakRate reads a backlog's leak_rate: a rate, at which the leak runs,
// or a mapping {max: RATE, adaptive: BOOL}, the most it runs at and
// whether it yields to a downstream that pushes back
// (docs/design.md#pushback).
func (d *decoder) leakRate(f *field, dst *bucket.Rate, adaptive *bool) bool {
	switch {
	case f.val != nil && f.val.Kind == yaml.MappingNode:
		var m leakRateDoc
		if !d.decode(f.val, f.holder, f.path, &m) {
			return false
		}
		ok := d.given(&m.Max, `the most backlog jobs that start per unit of time, a rate such as "50/s"`) && d.rate(&m.Max, dst)
		if m.Adaptive.val != nil && !d.boolean(&m.Adaptive, adaptive) {
			ok = false
		}
		return ok
	case f.val != nil && f.val.Kind != yaml.ScalarNode:
		d.errorf(f, "expected %s, or a mapping of max and adaptive, got %s", wantRate, describe(f.val))
		return false
	}
	return d.rate(f, dst)
}

func (d *decoder) boolean(f *field, dst *bool) bool {
	s, ok := d.scalar(f, "true or false")
	if !ok {
		return false
	}
	switch s {
	case "true", "True", "TRUE":
		*dst = true
	case "false", "False", "FALSE":
		*dst = false
	default:
		d.errorf(f, "%v", expected("true or false", s))
		return false
	}
	return true
}

// owned reads the fields of a value whose rules belong to another package
// (queue.Config, retry.Policy): config reads each field's syntax, the
// owner's validation decides what is allowed, and report puts the owner's
// problems at the fields' lines.
type owned struct {
	d      *decoder
	fields map[string]*field // by the owner's name of the field
	failed map[string]bool   // fields whose syntax was reported already
}

// int reads an integer field. Text that is not an integer is stored as -1,
// which every owner refuses: its problem says what was expected, and
// report shows it with the text as written.
func (o *owned) int(name string, dst *int64) {
	f := o.fields[name]
	if f.val == nil {
		return
	}
	*dst = -1
	if f.val.Kind == yaml.ScalarNode {
		if n, err := yamlInt(f.val); err == nil {
			*dst = n
		}
	}
}

// duration reads a duration field; its syntax is config's to report, its
// sign the owner's.
func (o *owned) duration(name string, dst *time.Duration) {
	f := o.fields[name]
	if s, ok := o.d.scalar(f, wantDuration); ok {
		v, err := time.ParseDuration(s)
		if err == nil {
			*dst = v
			return
		}
		o.d.errorf(f, "%v", expected(wantDuration, s))
	}
	o.failed[name] = f.val != nil
}

// report places the problems of an owner's validation (errors.Join of
// *queue.FieldError or *retry.FieldError) at the fields they name.
func (o *owned) report(err error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var p struct{ field, value, want, other, otherValue string }
		var qe *queue.FieldError
		var re *retry.FieldError
		switch {
		case e == nil:
			continue
		case errors.As(e, &qe):
			p.field, p.value, p.want, p.other, p.otherValue = qe.Field, qe.Value, qe.Want, qe.Other, qe.OtherValue
		case errors.As(e, &re):
			p.field, p.value, p.want, p.other, p.otherValue = re.Field, re.Value, re.Want, re.Other, re.OtherValue
		default: // not a field's problem: not to be lost either
			o.d.addf(nil, "", "%v", e)
			continue
		}
		f, of := o.fields[p.field], o.fields[p.other]
		switch {
		case f == nil || o.failed[p.field] || o.failed[p.other]:
			// reported where it is given (replicas at nats.replicas), or
			// its syntax was
		case of != nil && f.val == nil && of.val != nil:
			// The file gives only the bounding field: blame it. Both
			// bounds (per_key_capacity ≤ capacity, initial ≤ max) are
			// "at most".
			o.d.errorf(of, "expected at least %s (%s, the default), got %s", p.field, p.value, p.otherValue)
		case p.other != "":
			def := ""
			if of != nil && of.val == nil {
				def = ", the default"
			}
			o.d.errorf(f, "expected %s (%s%s), got %s", p.want, p.otherValue, def, p.value)
		case f.val != nil:
			o.d.errorf(f, "expected %s, got %s", p.want, describe(f.val))
		default:
			o.d.errorf(f, "expected %s, got %s", p.want, p.value)
		}
	}
}

// yamlInt reads an integer scalar as YAML writes it (1_000, 0x10) or as
// plain text.
func yamlInt(n *yaml.Node) (int64, error) {
	var v int64
	switch n.ShortTag() {
	case "!!int":
		return v, n.Decode(&v)
	case "!!str":
		return strconv.ParseInt(n.Value, 10, 64)
	}
	return 0, errors.New("not an integer")
}

// config reads the root mapping into c.
func (d *decoder) config(c *Config, root *yaml.Node) {
	var doc rootDoc
	if root = deref(root); root != nil && !isNull(root) && root.Kind != yaml.MappingNode {
		d.addf(root, "", "expected a mapping of %s, got %s", joinOr(docFields(reflect.TypeFor[rootDoc]()), "and"), describe(root))
		return
	}
	d.decode(root, &yaml.Node{Line: 1}, "", &doc) // an empty file: missing fields at line 1

	n := &doc.NATS.doc
	d.str(&n.URL, &c.NATS.URL, checkNATSURL)
	d.str(&n.Listen, &c.NATS.Listen, checkListen)
	d.filename(&n.StoreDir, &c.NATS.StoreDir)
	d.filename(&n.CredsFile, &c.NATS.CredsFile)
	if n.Replicas.val != nil {
		replicas := owned{d: d, fields: map[string]*field{"replicas": &n.Replicas}, failed: map[string]bool{}}
		var r int64
		replicas.int("replicas", &r)
		r = max(-1, min(r, 6)) // out of range either way, and an int on every platform
		if err := queue.ValidateReplicas(int(r)); err != nil {
			replicas.report(err)
		} else {
			c.NATS.Replicas = int(r)
		}
	}

	d.redis(&doc.Redis.doc, &c.Redis)
	r := &doc.Redis.doc
	var mode string
	if d.str(&r.FailureMode, &mode, func(s string) error { _, err := parseFailureMode(s); return err }) {
		c.Redis.FailureMode = FailureMode(mode)
	}
	d.duration(&r.Timeout, &c.Redis.Timeout, true)

	h := &doc.HTTP.doc
	d.str(&h.Listen, &c.HTTP.Listen, checkListen)
	d.ranged(&h.MaxBodyBytes, &c.HTTP.MaxBodyBytes, 1, math.MaxInt64)
	d.filename(&h.APIKeysFile, &c.HTTP.APIKeysFile)
	d.filename(&h.AdminKeysFile, &c.HTTP.AdminKeysFile)
	for i, item := range d.items(&h.TrustedProxies, "IP addresses or CIDR prefixes") {
		field := fmt.Sprintf("%s[%d]", h.TrustedProxies.path, i)
		if item == nil || item.Kind != yaml.ScalarNode || isNull(item) {
			d.addf(item, field, "expected %s, got %s", wantProxy, describe(item))
			continue
		}
		p, err := parseProxy(item.Value)
		if err != nil {
			d.addf(item, field, "%v", err)
			continue
		}
		c.HTTP.TrustedProxies = append(c.HTTP.TrustedProxies, p)
	}
	d.boolean(&h.ShowRawKeys, &c.HTTP.ShowRawKeys)

	w := &doc.Worker.doc
	concurrency := int64(c.Worker.Concurrency)
	d.ranged(&w.Concurrency, &concurrency, 1, maxInt)
	c.Worker.Concurrency = int(concurrency)
	d.duration(&w.GracePeriod, &c.Worker.GracePeriod, false)
	d.duration(&w.AckWait, &c.Worker.AckWait, true)
	d.duration(&doc.Status.doc.TTL, &c.Status.TTL, true)
	d.boolean(&doc.Status.doc.RecordRunning, &c.Status.RecordRunning)

	if !d.given(&doc.Queues, "a list of queues, at least one") {
		return
	}
	items := d.items(&doc.Queues, "queues")
	if len(items) == 0 && doc.Queues.val.Kind == yaml.SequenceNode {
		d.errorf(&doc.Queues, "expected at least one queue, got an empty list")
	}
	first := map[string]int{} // queue name → line
	for i, item := range items {
		q, nameAt := d.queue(item, doc.Queues.val, fmt.Sprintf("queues[%d]", i), c.NATS.Replicas)
		if q.Name == "" {
			c.Queues = append(c.Queues, q)
			continue
		}
		if line, dup := first[q.Name]; dup {
			d.addf(nameAt, fmt.Sprintf("queues[%d].name", i), "queue %q is already defined at line %d", q.Name, line)
			continue
		}
		first[q.Name] = nameAt.Line
		c.Queues = append(c.Queues, q)
	}
}

// queue reads one item of queues. It returns the node of the name, where a
// duplicate name is reported.
func (d *decoder) queue(n, parent *yaml.Node, path string, replicas int) (Queue, *yaml.Node) {
	var q Queue
	var doc queueDoc
	if isNull(n) {
		d.addf(orNode(n, parent), path, "expected a queue (a mapping of %s), got nothing", joinOr(docFields(reflect.TypeFor[queueDoc]()), "and"))
		return q, nil
	}
	if !d.decode(n, parent, path, &doc) {
		return q, nil
	}
	if d.given(&doc.Name, wantQueue) {
		d.str(&doc.Name, &q.Name, checkQueueName)
	}

	limits := &doc.Limits.field
	items := d.items(limits, "limit tiers")
	switch {
	case limits.val == nil:
		d.missing(limits, `a list of limit tiers, such as [{key: global, rate: "10/s", burst: 20}]`)
	case len(items) == 0 && limits.val.Kind == yaml.SequenceNode:
		d.errorf(limits, "expected at least one limit tier, got an empty list")
	case len(items) > bucket.MaxTiers:
		d.errorf(limits, "expected at most %d limit tiers, got %d", bucket.MaxTiers, len(items))
	}
	// Tiers may share a key ("10/s and 1000/h per API key"): the admitter
	// gives each tier its own bucket. Names are unique in the queue,
	// counting the default names of the tiers the file leaves unnamed.
	type given struct {
		at   *yaml.Node
		tier int
	}
	named := map[string]given{} // names the file gives
	unnamed := map[string]int{} // default names in use → tier index
	for i, item := range items {
		l, nameAt, ok := d.limit(item, limits.val, fmt.Sprintf("%s.limits[%d]", path, i))
		if !ok {
			continue
		}
		if l.Name == "" {
			l.Name = DefaultTierName(i)
			unnamed[l.Name] = i
		} else {
			if first, dup := named[l.Name]; dup {
				d.addf(nameAt, fmt.Sprintf("%s.limits[%d].name", path, i), "tier name %q is already given at line %d", l.Name, first.at.Line)
				continue
			}
			named[l.Name] = given{nameAt, i}
		}
		q.Limits = append(q.Limits, l)
	}
	if len(q.Limits) > 0 && !slices.ContainsFunc(q.Limits, func(l Limit) bool { return !l.Shadow() }) {
		d.errorf(limits, `every tier is mode: shadow; at least one must enforce (a queue admits through its enforcing tiers), such as {key: global, rate: "1000/s", burst: 1000}`)
	}
	for name, g := range named {
		if j, clash := unnamed[name]; clash {
			d.addf(g.at, fmt.Sprintf("%s.limits[%d].name", path, g.tier),
				"tier name %q is the default name of limits[%d], which has no name; name that tier too, or choose another name", name, j)
		}
	}

	q.Backlog = d.backlog(&doc, q.Name, replicas)
	q.Retry = d.retry(&doc.Retry.doc)
	if doc.Handler.val != nil {
		q.Handler = d.handler(&doc.Handler)
	}
	return q, doc.Name.at()
}

// limit reads one limit tier into a bucket.Spec, and bucket's Build
// decides whether it is a limit. It returns the node of the name, where a
// repeated name is reported.
func (d *decoder) limit(n, parent *yaml.Node, path string) (Limit, *yaml.Node, bool) {
	var l Limit
	var t limitDoc
	if isNull(n) {
		d.addf(orNode(n, parent), path, "expected a limit tier (a mapping of %s), got nothing", joinOr(docFields(reflect.TypeFor[limitDoc]()), "and"))
		return l, nil, false
	}
	before := len(d.errs)
	if !d.decode(n, parent, path, &t) {
		return l, nil, false
	}
	if s, ok := d.scalar(&t.Key, wantKey); d.given(&t.Key, wantKey) && ok {
		k, err := parseKey(s)
		if err != nil {
			d.errorf(&t.Key, "%v", err)
		}
		l.Key = k
	}
	d.str(&t.Name, &l.Name, checkTierName)
	l.OnMissing = MissingReject
	var missing string
	if d.str(&t.OnMissing, &missing, func(s string) error { _, err := parseOnMissing(s); return err }) {
		switch {
		case l.Key.Kind == KeyHeader:
			l.OnMissing = OnMissing(missing)
		case t.Key.val != nil:
			d.errorf(&t.OnMissing, "applies to header:NAME keys only, not to %s", l.Key)
		}
	}
	l.Mode = ModeEnforce
	var mode string
	if d.str(&t.Mode, &mode, func(s string) error { _, err := parseMode(s); return err }) {
		l.Mode = Mode(mode)
	}

	var spec bucket.Spec
	if d.str(&t.Algorithm, &spec.Algorithm, nil) {
		if _, err := bucket.ParseAlgorithm(spec.Algorithm); err != nil {
			var names []string
			for a := bucket.LeakyBucket; a <= bucket.SlidingWindow; a++ {
				names = append(names, a.String())
			}
			d.errorf(&t.Algorithm, "%v", withSuggestion(expected("one of "+joinOr(names, "or"), spec.Algorithm), spec.Algorithm, names))
			return l, t.Name.at(), false
		}
	}
	params := paramFields{rate: &t.Rate, burst: &t.Burst, delay: &t.Delay, nodelay: &t.NoDelay, limit: &t.Limit, window: &t.Window}
	built, ok := d.params(n, path, params, &spec, before)
	if !ok {
		return l, t.Name.at(), false
	}
	l.Limit = built
	if !d.overrides(&t.Overrides, path, built.Algorithm(), &l) {
		return l, t.Name.at(), false
	}
	return l, t.Name.at(), true
}

// paramFields are the fields of a limit's parameters, in a tier or in one
// of its overrides.
type paramFields struct {
	rate, burst, delay, nodelay, limit, window *field
}

// params reads a limit's parameters into spec (its Algorithm set by the
// caller), and bucket's Build decides whether they are a limit, its
// problems reported at the fields they name. before is how many problems
// the item had when its reading began: with more now, nothing is built.
func (d *decoder) params(n *yaml.Node, path string, t paramFields, spec *bucket.Spec, before int) (bucket.Limit, bool) {
	if s, ok := d.scalar(t.rate, wantRate); ok {
		if _, err := parseRate(s); err != nil {
			d.errorf(t.rate, "%v", err)
		}
		spec.Rate = s
	}
	for _, x := range []struct {
		f   *field
		dst *int64
	}{{t.burst, &spec.Burst}, {t.delay, &spec.Delay}, {t.limit, &spec.Limit}} {
		if x.f.val != nil {
			*x.dst, _ = d.integer(x.f, "an integer")
		}
	}
	d.boolean(t.nodelay, &spec.NoDelay)
	if s, ok := d.scalar(t.window, wantDuration); ok {
		if _, err := time.ParseDuration(s); err != nil {
			d.errorf(t.window, "%v", expected(wantDuration, s))
		}
		spec.Window = s
	}
	if len(d.errs) > before {
		return bucket.Limit{}, false
	}

	built, err := spec.Build()
	var le *bucket.LimitError
	if errors.As(err, &le) {
		f := map[string]*field{"rate": t.rate, "burst": t.burst, "delay": t.delay, "nodelay": t.nodelay,
			"limit": t.limit, "window": t.window}[le.Field]
		switch {
		case f == nil:
			d.addf(n, path, "%v", err)
		case f.val == nil && le.Want != "":
			d.missing(f, le.Want)
		case le.Value != "":
			d.errorf(f, "%s, got %s", le.Reason, le.Value)
		default:
			d.errorf(f, "%s", le.Reason)
		}
	} else if err != nil {
		d.addf(n, path, "%v", err)
	}
	return built, err == nil
}

// overrides reads a tier's overrides into l.Overrides: each a key or
// prefix, given once, and parameters of the tier's algorithm, validated
// as the tier's own are.
func (d *decoder) overrides(f *list[overrideDoc], path string, alg bucket.Algorithm, l *Limit) bool {
	items := d.items(&f.field, "overrides")
	if len(items) > 0 && l.Key.Kind == KeyGlobal {
		d.errorf(&f.field, "a global tier has one key, which its own parameters limit: overrides apply to header:NAME and ip tiers")
		return false
	}
	var list []overrides.Override
	seen := map[overrides.Pattern]int{} // → line
	ok := true
	for i, item := range items {
		ipath := fmt.Sprintf("%s.overrides[%d]", path, i)
		if isNull(item) {
			d.addf(orNode(item, f.val), ipath, "expected an override (a mapping of %s), got nothing", joinOr(docFields(reflect.TypeFor[overrideDoc]()), "and"))
			ok = false
			continue
		}
		var o overrideDoc
		before := len(d.errs)
		if !d.decode(item, f.val, ipath, &o) {
			ok = false
			continue
		}
		var p overrides.Pattern
		if s, sok := d.scalar(&o.Key, wantPattern); d.given(&o.Key, wantPattern) && sok {
			var err error
			if p, err = overrides.ParsePattern(s); err != nil {
				d.errorf(&o.Key, "%v", err)
			} else if line, dup := seen[p]; dup {
				d.errorf(&o.Key, "key %.80q is already overridden at line %d", s, line)
			} else {
				seen[p] = o.Key.at().Line
			}
		}
		spec := bucket.Spec{Algorithm: alg.String()}
		params := paramFields{rate: &o.Rate, burst: &o.Burst, delay: &o.Delay, nodelay: &o.NoDelay, limit: &o.Limit, window: &o.Window}
		built, bok := d.params(item, ipath, params, &spec, before)
		if !bok || len(d.errs) > before {
			ok = false
			continue
		}
		list = append(list, overrides.Override{Pattern: p, Limit: built, Source: overrides.SourceConfig, Line: item.Line,
			Params: overrides.Params{Rate: spec.Rate, Burst: spec.Burst, Delay: spec.Delay, NoDelay: spec.NoDelay, Limit: spec.Limit, Window: spec.Window}})
	}
	l.Overrides = overrides.NewTable(list)
	return ok
}

// backlog reads a queue's backlog and ready sections into a queue.Config,
// and queue's ValidateGiven decides what may be used. A backlog needs a
// leak rate: the worker refuses a queue whose backlog would never drain.
func (d *decoder) backlog(q *queueDoc, name string, replicas int) queue.Config {
	cfg := queue.Config{
		Name:            name,
		Capacity:        queue.DefaultCapacity,
		ReadyCapacity:   queue.DefaultReadyCapacity,
		Replicas:        replicas,
		DuplicateWindow: queue.DefaultDuplicateWindow,
		MaxDelay:        queue.DefaultMaxDelay,
	}
	b := &q.Backlog.doc
	o := owned{d: d, failed: map[string]bool{}, fields: map[string]*field{
		"capacity": &b.Capacity, "per_key_capacity": &b.PerKeyCapacity, "leak_rate": &b.LeakRate,
		"max_age": &b.MaxAge, "max_delay": &b.MaxDelay, "duplicate_window": &b.DuplicateWindow, "ready_capacity": &q.Ready.doc.Capacity,
	}}
	o.int("capacity", &cfg.Capacity)
	o.int("per_key_capacity", &cfg.PerKeyCapacity)
	if d.given(&b.LeakRate, `a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one`) {
		o.failed["leak_rate"] = !d.leakRate(&b.LeakRate, &cfg.LeakRate, &cfg.Adaptive)
	}
	o.duration("max_age", &cfg.MaxAge)
	o.duration("max_delay", &cfg.MaxDelay)
	o.duration("duplicate_window", &cfg.DuplicateWindow)
	// READY's bound lives with the backlog's: both are the queue's stream
	// settings (queue.Config).
	o.int("ready_capacity", &cfg.ReadyCapacity)
	d.fairness(&b.Fairness, &o, &cfg.Fairness) // fairness.go
	o.report(cfg.ValidateGiven())
	return cfg
}

// retry reads a queue's retry section into a retry.Policy, and retry's
// ValidateGiven decides what may be used.
func (d *decoder) retry(r *retryDoc) retry.Policy {
	p := retry.Policy{
		MaxAttempts: retry.DefaultMaxAttempts,
		Initial:     retry.DefaultInitial,
		Max:         retry.DefaultMax,
		Jitter:      retry.DefaultJitter,
	}
	o := owned{d: d, failed: map[string]bool{}, fields: map[string]*field{
		"max_attempts": &r.MaxAttempts, "initial": &r.Initial, "max": &r.Max, "jitter": &r.Jitter,
	}}
	attempts := int64(p.MaxAttempts)
	o.int("max_attempts", &attempts)
	p.MaxAttempts = int(max(-1, min(attempts, maxInt)))
	o.duration("initial", &p.Initial)
	o.duration("max", &p.Max)
	if r.Jitter.val != nil {
		p.Jitter = math.NaN() // refused by retry, as o.int's -1
		if r.Jitter.val.Kind == yaml.ScalarNode {
			if x, err := strconv.ParseFloat(r.Jitter.val.Value, 64); err == nil {
				p.Jitter = x
			}
		}
	}
	o.report(p.ValidateGiven())
	if p.Jitter == 0 {
		p.Jitter = -1 // retry.Policy: 0 is the default, negative is none
	}
	return p
}

// handler reads a queue's handler: exactly one of http, nats and log: true.
func (d *decoder) handler(s *section[handlerDoc]) Handler {
	var h Handler
	var kinds []string
	if s.doc.HTTP.val != nil {
		kinds = append(kinds, "http")
		h.HTTP = d.httpHandler(&s.doc.HTTP.doc)
	}
	if s.doc.NATS.val != nil {
		kinds = append(kinds, "nats")
		n := &s.doc.NATS.doc
		h.NATS = &NATSHandler{Timeout: DefaultHandlerTimeout}
		if d.given(&n.Subject, wantSubject) {
			d.str(&n.Subject, &h.NATS.Subject, checkSubject)
		}
		d.duration(&n.Timeout, &h.NATS.Timeout, true)
	}
	if d.boolean(&s.doc.Log, &h.Log) && h.Log {
		kinds = append(kinds, "log")
	}
	switch len(kinds) {
	case 0:
		d.addf(s.val, s.path, "expected one of http, nats or log: true (leave handler out for an admit-only queue)")
	case 1:
	default:
		d.addf(s.val, s.path, "expected one kind of handler, got %s", joinOr(kinds, "and"))
	}
	return h
}

func (d *decoder) httpHandler(f *httpHandlerDoc) *HTTPHandler {
	h := &HTTPHandler{Timeout: DefaultHandlerTimeout}
	if d.given(&f.URL, wantHTTPURL) {
		d.str(&f.URL, &h.URL, checkHTTPURL)
	}
	d.duration(&f.Timeout, &h.Timeout, true)

	n, path := f.Headers.val, f.Headers.path
	if n == nil {
		return h
	}
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "expected a mapping of header names to values, got %s", describe(n))
		return h
	}
	h.Headers = map[string]string{}
	first := map[string]int{}
	d.entries(n, path, "a header name", func(k, v, raw *yaml.Node) {
		field := join(path, k.Value)
		name, err := headerName(k.Value)
		if err != nil {
			d.addf(k, field, "%v", err)
			return
		}
		if line, dup := first[name]; dup {
			d.addf(k, field, "header %s is already given at line %d", name, line)
			return
		}
		first[name] = k.Line
		if isNull(v) || v.Kind != yaml.ScalarNode {
			d.addf(raw, field, "expected a header value, got %s", describe(raw))
			return
		}
		if err := checkHeaderValue(v.Value); err != nil {
			d.addf(v, field, "%v", err)
			return
		}
		h.Headers[name] = v.Value
	})
	return h
}

// entries calls fn with each entry of mapping n whose key is a scalar —
// the key, the value (aliases followed; nil for a null) and the value's
// node as written — within the decoder's budget; a key that is not a
// scalar is reported as not being want.
func (d *decoder) entries(n *yaml.Node, path, want string, fn func(k, v, raw *yaml.Node)) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !d.spend() {
			return
		}
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			d.addf(n.Content[i], path, "expected %s, got %s", want, describe(n.Content[i]))
			continue
		}
		fn(k, v, n.Content[i+1])
	}
}
