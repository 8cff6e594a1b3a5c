package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The file's shape (docs/design.md#configuration): one struct per mapping,
// decoded by yaml.v3 with unknown fields refused. Each yaml tag is the one
// place a setting's name is written: paths in messages are built from the
// tags, and the owners' field names (queue, retry, bucket) are found by
// them; a list's list tag names its items in messages. Leaves (leaf.go)
// keep their node, so that every problem has its line.
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
		URL       text    `yaml:"url"`
		Listen    text    `yaml:"listen"`
		StoreDir  text    `yaml:"store_dir"`
		CredsFile text    `yaml:"creds_file"`
		Replicas  integer `yaml:"replicas"`
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
		Listen         text    `yaml:"listen"`
		MaxBodyBytes   integer `yaml:"max_body_bytes"`
		APIKeysFile    text    `yaml:"api_keys_file"`
		AdminKeysFile  text    `yaml:"admin_keys_file"`
		TrustedProxies []*text `yaml:"trusted_proxies" list:"IP addresses or CIDR prefixes"`
		ShowRawKeys    boolean `yaml:"show_raw_keys"`
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

// maxValues bounds the values one file may hold once aliases are
// expanded: yaml.v3 refuses a file whose aliases expand far beyond its
// size, and place stops at this many, so that a small file of aliases
// cannot make Load build millions of values.
const maxValues = 100_000

const tooManyValues = "too many values once aliases are expanded; simplify the file"

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
	file     string // the file name as given, for every FieldError
	dir      string // relative paths in the file are relative to this directory
	errs     []problem
	pos      map[any]at
	yamlErrs map[[2]string]string // yaml.v3's problems by line and key: unknown or a duplicate
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
	d := &decoder{file: name, dir: filepath.Dir(name), pos: map[any]at{}}
	c := defaults()
	var doc rootDoc
	if root, ok := d.document(data); ok && d.decode(data, root, &doc) {
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

// decode has yaml.v3 read the document into doc, unknown fields refused,
// and places every value of doc (place). It reports false when nothing
// more can be read.
func (d *decoder) decode(data []byte, root *yaml.Node, doc *rootDoc) (ok bool) {
	defer func() { // third-party code on whatever the file holds
		if r := recover(); r != nil {
			d.add(at{}, fmt.Sprintf("the YAML parser failed: %v", r))
			ok = false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(doc)
	var te *yaml.TypeError
	switch {
	case err == nil || errors.Is(err, io.EOF):
	case errors.As(err, &te):
		d.yamlErrs = map[[2]string]string{}
		for _, e := range te.Errors {
			d.yamlError(e)
		}
	default:
		d.fatal(err, data, root)
		return false
	}
	d.place(reflect.ValueOf(doc).Elem(), root, at{line: 1, col: 1})
	if len(d.pos) > maxValues {
		d.errs = nil // the rest of the walk was skipped: its problems would mislead
		d.add(at{}, tooManyValues)
		return false
	}
	for k, problem := range d.yamlErrs { // not found where place looked
		line, _ := strconv.Atoi(k[0])
		if problem == "" {
			problem = "unknown field " + k[1]
		}
		d.add(at{line: line}, problem)
	}
	return true
}

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (.*) not found in type \S+$`)
	duplicateKey = regexp.MustCompile(`^line (\d+): mapping key (".*") already defined at line (\d+)$`)
	typeMismatch = regexp.MustCompile(`^line \d+: cannot unmarshal \S+.* into \S*config\.`)
)

// yamlError files one of yaml.v3's problems under its line and key, for
// place to report with its path: a field unknown to the struct, a key
// given twice. A value of the wrong kind for a mapping or list is place's
// to report.
func (d *decoder) yamlError(e string) {
	if m := unknownField.FindStringSubmatch(e); m != nil {
		d.yamlErrs[[2]string{m[1], m[2]}] = ""
	} else if m := duplicateKey.FindStringSubmatch(e); m != nil {
		key, _ := strconv.Unquote(m[2])
		d.yamlErrs[[2]string{m[1], key}] = fmt.Sprintf("given twice (first at line %s)", m[3])
	} else if !typeMismatch.MatchString(e) {
		line, rest, _ := strings.Cut(strings.TrimPrefix(e, "line "), ": ")
		d.yamlErrs[[2]string{line, ""}] = "invalid YAML: " + rest
	}
}

// fatal reports what stops yaml.v3 from reading the document at all.
func (d *decoder) fatal(err error, data []byte, root *yaml.Node) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	switch name, self := strings.CutPrefix(msg, "anchor '"); {
	case msg == "document contains excessive aliasing":
		d.add(at{}, tooManyValues)
	case self:
		name, _, _ = strings.Cut(name, "'")
		path, n := find(root, func(_, v *yaml.Node) bool { return v.Kind == yaml.AliasNode && v.Value == name })
		d.add(at{path: path, line: n.Line}, fmt.Sprintf("anchor %q holds an alias to itself (*%s), which would never end", name, name))
	case strings.HasPrefix(msg, "map merge requires"):
		path, n := find(root, func(k, v *yaml.Node) bool {
			items := []*yaml.Node{v}
			if v = deref(v); v != nil && v.Kind == yaml.SequenceNode {
				items = v.Content
			}
			return k != nil && isMerge(k) && slices.ContainsFunc(items, func(n *yaml.Node) bool {
				n = deref(n)
				return n == nil || n.Kind != yaml.MappingNode
			})
		})
		d.add(at{path: path, line: n.Line}, "expected a mapping or a list of mappings to merge (<<), got "+describe(deref(n)))
	default:
		d.add(at{line: 1}, "invalid YAML: "+msg)
	}
}

// find is the path and the value of the first value of the document, as
// written (aliases not followed), for which pred (given its key, nil in a
// list) is true; the path of a merge key (<<) is its mapping's. It returns
// the root when none is.
func find(root *yaml.Node, pred func(k, v *yaml.Node) bool) (string, *yaml.Node) {
	var found *yaml.Node
	var foundAt string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		for i := 0; found == nil && n != nil && i < len(n.Content); i++ {
			k, v, p := (*yaml.Node)(nil), n.Content[i], fmt.Sprintf("%s[%d]", path, i)
			if n.Kind == yaml.MappingNode {
				if i%2 == 0 {
					continue
				}
				if k, p = n.Content[i-1], join(path, n.Content[i-1].Value); isMerge(k) {
					p = path
				}
			}
			if pred(k, v) {
				found, foundAt = v, p
				return
			}
			walk(v, p)
		}
	}
	walk(root, "")
	if found == nil {
		return "", &yaml.Node{Line: 1}
	}
	return foundAt, found
}

// place walks doc (v, a value of a mapping struct) and its node n
// together: it records where each value is or would be (d.pos, by its
// address), reports leaves' syntax, values of the wrong kind for a
// mapping or list, and yaml.v3's problems with their paths. The fields of
// a mapping reported as wrong are not placed: a rule that looks for their
// place finds none and stays quiet, so that one mistake is one problem.
func (d *decoder) place(v reflect.Value, n *yaml.Node, a at) {
	if n = deref(n); n != nil && !isNull(n) {
		a.line, a.col = n.Line, n.Column
	} else {
		n = nil
	}
	if len(d.pos) > maxValues {
		return
	}
	p := v.Addr().Interface()
	d.pos[p] = a
	if l, ok := p.(leafer); ok {
		if err := l.base().err; err != nil {
			d.add(a, err.Error())
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			if d.place(v.Elem(), n, a); !d.placed(v.Interface()) {
				v.SetZero()
			}
		}
	case reflect.Slice:
		d.placeItems(v, n, a)
	case reflect.Struct:
		if s, ok := p.(shortForm); ok && n != nil && n.Kind == yaml.ScalarNode {
			s.short(n)
			d.place(v.Field(0), n, a)
			return
		}
		if n != nil && n.Kind != yaml.MappingNode {
			delete(d.pos, p)
			want := "a mapping of " + joinOr(fieldNames(v.Type()), "and")
			if s, ok := p.(shortForm); ok {
				want = s.shortWant() + ", or " + want
			}
			d.add(a, fmt.Sprintf("expected %s, got %s", want, describe(n)))
			return
		}
		if d.keyProblems(v.Type(), n, a) {
			delete(d.pos, p)
			return
		}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fa := at{path: join(a.path, name), line: a.line, col: a.col}
			switch fn := lookup(n, name); {
			case f.Anonymous:
				d.place(v.Field(i), n, a)
			case name == "":
			case f.Type.Kind() == reflect.Slice && deref(fn) != nil && !isNull(deref(fn)) && deref(fn).Kind != yaml.SequenceNode:
				fn = deref(fn)
				d.add(atNode(fa.path, fn), fmt.Sprintf("expected a list of %s, got %s", f.Tag.Get("list"), describe(fn)))
			default:
				d.place(v.Field(i), fn, fa)
			}
		}
	}
}

func (d *decoder) placed(p any) bool {
	_, ok := d.pos[p]
	return ok
}

// placeItems places the items of list n in v, a slice of pointers.
// yaml.v3 keeps an item when it could read it, a null as nil, and leaves
// out the others: an item of a list of mappings that is not a mapping, or
// has a key twice. Those are reported here, and v is realigned with n,
// nil in their place.
func (d *decoder) placeItems(v reflect.Value, n *yaml.Node, a at) {
	if n == nil {
		return
	}
	elem := v.Type().Elem().Elem()
	isLeaf := reflect.PointerTo(elem).Implements(leafType)
	items := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, j := 0, 0; i < len(n.Content) && j < v.Len(); i++ {
		if item := deref(n.Content[i]); item == nil || isLeaf || isNull(item) || (item.Kind == yaml.MappingNode && !hasDuplicate(item)) {
			items.Index(i).Set(v.Index(j))
			j++
		}
	}
	v.Set(items)
	for i, item := range n.Content {
		item = deref(item)
		if item == nil {
			continue
		}
		ia := atNode(fmt.Sprintf("%s[%d]", a.path, i), item)
		switch e := v.Index(i); {
		case !e.IsNil() || isLeaf:
			d.place(e, item, ia)
		case isNull(item):
			d.add(ia, fmt.Sprintf("expected %s (a mapping of %s), got nothing", itemNoun[elem.Name()], joinOr(fieldNames(elem), "and")))
		case item.Kind == yaml.MappingNode:
			d.keyProblems(elem, item, ia)
		default:
			d.add(ia, fmt.Sprintf("expected a mapping of %s, got %s", joinOr(fieldNames(elem), "and"), describe(item)))
		}
	}
}

// hasDuplicate reports whether mapping n has a key twice, which makes
// yaml.v3 leave it unread.
func hasDuplicate(n *yaml.Node) bool {
	for i := 0; i < len(n.Content); i += 2 {
		for j := i + 2; j < len(n.Content); j += 2 {
			if n.Content[i].Kind == n.Content[j].Kind && n.Content[i].Value == n.Content[j].Value {
				return true
			}
		}
	}
	return false
}

// itemNoun names an item of a list of mappings, for "got nothing".
var itemNoun = map[string]string{"queueDoc": "a queue", "limitDoc": "a limit tier", "overrideDoc": "an override"}

// keyProblems reports yaml.v3's problems with the keys of mapping n (and
// those it merges), which a struct of type t reads, and whether n was
// left unread for a key given twice.
func (d *decoder) keyProblems(t reflect.Type, n *yaml.Node, a at) (unread bool) {
	if len(d.yamlErrs) == 0 || n == nil {
		return false
	}
	known := fieldNames(t)
	pairs(n, 0, func(k, _ *yaml.Node) {
		id := [2]string{strconv.Itoa(k.Line), k.Value}
		problem, found := d.yamlErrs[id]
		if !found {
			return
		}
		delete(d.yamlErrs, id)
		ka := atNode(join(a.path, k.Value), k)
		switch {
		case problem != "":
			unread = true
			d.add(ka, problem)
		case a.path == "" && strings.HasPrefix(k.Value, "x-"):
			// an extension field: a place for anchors, as in Compose files
		default:
			d.add(ka, "unknown field"+unknownHint(k.Value, t, known))
		}
	})
	return unread
}

// pairs calls fn with each key and value of mapping n: its own, then
// those of its merge keys (<<) in order.
func pairs(n *yaml.Node, depth int, fn func(k, v *yaml.Node)) {
	if n = deref(n); n == nil || n.Kind != yaml.MappingNode || depth > 8 {
		return
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !isMerge(k) {
			fn(k, n.Content[i+1])
		} else if m := deref(n.Content[i+1]); m != nil && m.Kind == yaml.SequenceNode {
			merges = append(merges, m.Content...)
		} else {
			merges = append(merges, m)
		}
	}
	for _, m := range merges {
		pairs(m, depth+1, fn)
	}
}

// lookup is the value of key name in mapping n: its own, or else that of
// the first of its merge keys that has it, as yaml.v3 reads merges.
func lookup(n *yaml.Node, name string) (v *yaml.Node) {
	pairs(n, 0, func(k, val *yaml.Node) {
		if v == nil && k.Value == name {
			v = val
		}
	})
	return v
}

// fieldNames lists the yaml names of a mapping struct's fields, those of
// an inline one included.
func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); opts == "inline" {
			names = append(names, fieldNames(f.Type)...)
		} else if name != "" {
			names = append(names, name)
		}
	}
	return names
}

// unknownHint says what an unknown field may have meant: a close name, or
// the section it belongs to, or else the fields allowed here.
func unknownHint(name string, t reflect.Type, known []string) string {
	if s := suggest(name, known); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	var under []string
	for i := range t.NumField() {
		f := t.Field(i)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if section, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); ft.Kind() == reflect.Struct && !f.Anonymous &&
			!reflect.PointerTo(ft).Implements(leafType) && slices.Contains(fieldNames(ft), name) {
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
	switch {
	case isNull(n):
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
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

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}
