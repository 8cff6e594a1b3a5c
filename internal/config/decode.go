package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// The fields of each mapping of the file (docs/design.md#configuration).
var (
	rootFields        = []string{"nats", "redis", "http", "worker", "status", "queues"}
	natsFields        = []string{"url", "listen", "store_dir", "creds_file", "replicas"}
	redisFields       = []string{"url", "failure_mode", "timeout"}
	httpFields        = []string{"listen", "max_body_bytes", "api_keys_file", "trusted_proxies"}
	workerFields      = []string{"concurrency", "grace_period", "ack_wait"}
	statusFields      = []string{"ttl"}
	queueFields       = []string{"name", "limits", "backlog", "ready", "retry", "handler"}
	limitFields       = []string{"key", "algorithm", "rate", "burst", "delay", "nodelay", "limit", "window", "name", "on_missing"}
	backlogFields     = []string{"capacity", "per_key_capacity", "leak_rate", "max_age", "duplicate_window"}
	readyFields       = []string{"capacity"}
	retryFields       = []string{"max_attempts", "initial", "max", "jitter"}
	handlerFields     = []string{"http", "nats", "log"}
	httpHandlerFields = []string{"url", "timeout", "headers"}
	natsHandlerFields = []string{"subject", "timeout"}
)

// The sections of a mapping, so that a field written one level too high
// ("leak_rate" directly in a queue) is pointed to where it belongs.
var (
	rootSections = map[string][]string{
		"nats": natsFields, "redis": redisFields, "http": httpFields, "worker": workerFields, "status": statusFields,
	}
	queueSections = map[string][]string{
		"limits": limitFields, "backlog": backlogFields, "ready": readyFields, "retry": retryFields, "handler": handlerFields,
	}
	handlerSections = map[string][]string{"http": httpHandlerFields, "nats": natsHandlerFields}
)

// maxValues bounds the values one file may hold once aliases are expanded,
// so that a small file of nested aliases cannot make Load walk billions.
const maxValues = 100_000

// maxProblems bounds the problems reported for one file; the rest are
// counted. A real file has a few; thousands mean it is not a config file.
const maxProblems = 100

// maxMergeDepth bounds nested merge keys (<<), which may refer to themselves.
const maxMergeDepth = 8

// decoder walks a YAML document into a Config, collecting every problem.
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
		Worker: Worker{Concurrency: queue.DefaultConcurrency, GracePeriod: DefaultGracePeriod, AckWait: DefaultAckWait},
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

// spend takes one value from the budget and reports once when it runs out.
func (d *decoder) spend() bool {
	d.budget--
	if d.budget == -1 { // kept even beyond maxProblems: it explains the rest
		d.errs = append(d.errs, &FieldError{Source: d.file,
			Problem: fmt.Sprintf("more than %d values once aliases are expanded; simplify the file", maxValues)})
	}
	return d.budget >= 0
}

// document parses data into its root node: nil (and ok) for an empty file.
// It reports syntax errors, a second document and text YAML cannot hold.
func (d *decoder) document(data []byte) (root *yaml.Node, ok bool) {
	if line, problem := checkText(data); problem != "" {
		d.errs = append(d.errs, &FieldError{Source: d.file, Line: line, Problem: problem})
		return nil, false
	}
	// The parser is third-party code running on whatever the file holds;
	// a reload must not take the process down if it panics.
	defer func() {
		if r := recover(); r != nil {
			d.addf(nil, "", "the YAML parser failed: %v", r)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true // empty, or only comments
		}
		d.syntax(err, data)
		return nil, false
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err, data)
		return nil, false
	default:
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		d.errs = append(d.errs, &FieldError{Source: d.file, Line: line,
			Problem: "expected one YAML document, found a second one (a line \"---\" starts a new document)"})
		return nil, false
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	return doc.Content[0], true
}

var (
	yamlLineRE   = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)
)

// syntax reports a yaml.v3 parse error with its line. yaml.v3 counts lines
// from 0 for parser errors ("did not find expected …") and from 1 for
// scanner errors, and leaves the line out when it is the first one.
// TestProblems pins these cases.
func (d *decoder) syntax(err error, data []byte) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if isParserProblem(msg) {
			line++
		}
	} else if m := yamlAnchorRE.FindStringSubmatch(msg); m != nil {
		line = lineOf(data, "*"+m[1])
	}
	// The end of the stream counts as a line after the last: report the
	// last line, where the unfinished construct is.
	line = max(1, min(line, lastLine(data)))
	d.errs = append(d.errs, &FieldError{Source: d.file, Line: line, Problem: "invalid YAML: " + msg})
}

func isParserProblem(msg string) bool {
	return strings.HasPrefix(msg, "did not find expected") ||
		strings.HasPrefix(msg, "found duplicate %") ||
		msg == "found incompatible YAML document" ||
		msg == "found undefined tag handle"
}

// lineOf is the 1-based line of the first occurrence of s in data, or 1.
func lineOf(data []byte, s string) int {
	i := bytes.Index(data, []byte(s))
	if i < 0 {
		return 1
	}
	return 1 + lineBreaks(data[:i])
}

// lastLine is the line of the last character of data (1 if it is empty).
func lastLine(data []byte) int {
	n := lineBreaks(data)
	if len(data) == 0 || isBreakAt(data, len(data)-1) {
		return max(1, n)
	}
	return n + 1
}

// lineBreaks counts line breaks as YAML does: CR LF, CR, LF, NEL, LS and
// PS.
func lineBreaks(data []byte) int {
	n := 0
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch r {
		case '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				size++
			}
			n++
		case '\n', 0x85, 0x2028, 0x2029:
			n++
		}
		i += size
	}
	return n
}

// isBreakAt reports whether data ends a line at byte i (the last byte of a
// line break).
func isBreakAt(data []byte, i int) bool {
	if data[i] == '\n' || data[i] == '\r' {
		return true
	}
	r, _ := utf8.DecodeLastRune(data[:i+1])
	return r == 0x85 || r == 0x2028 || r == 0x2029
}

// checkText finds what the YAML reader refuses, so that it can be reported
// with its line: invalid UTF-8 and control characters.
func checkText(data []byte) (line int, problem string) {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return 1 + lineBreaks(data[:i]), fmt.Sprintf("invalid UTF-8 (byte 0x%02x); the file must be UTF-8 text", data[i])
		case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		case r < 0x20 || (0x7f <= r && r <= 0x9f) || r == 0xfffe || r == 0xffff:
			return 1 + lineBreaks(data[:i]), fmt.Sprintf("control character %U is not allowed in YAML", r)
		}
		i += size
	}
	return 0, ""
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

// fields is one YAML mapping's fields by name, merge keys applied.
type fields struct {
	d    *decoder
	path string     // of the mapping: "" for the root, "queues[0].backlog"
	node *yaml.Node // the mapping, or its parent's when absent: where a missing field is reported
	keys map[string]*yaml.Node
	vals map[string]*yaml.Node // the fields set to something other than null
	bad  bool                  // not a mapping (reported): missing fields are not reported too
}

// mapping reads n as a mapping with the known fields; it reports unknown and
// repeated fields. n may be nil (absent): an empty mapping whose missing
// fields are reported at parent.
func (d *decoder) mapping(n, parent *yaml.Node, path string, known []string, sections map[string][]string) *fields {
	f := &fields{d: d, path: path, node: parent, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	n = deref(n)
	if isNull(n) {
		return f
	}
	f.node = n
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "expected a mapping of %s, got %s", joinOr(known, "and"), describe(n))
		f.bad = true
		return f
	}
	d.collect(f, n, known, sections, 0)
	return f
}

// collect adds the fields of mapping n to f: its own first, then those of
// its merge keys (<<) that f does not have yet, as YAML's merge key
// specifies.
func (d *decoder) collect(f *fields, n *yaml.Node, known []string, sections map[string][]string, depth int) {
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !d.spend() {
			return
		}
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.addf(n.Content[i], f.path, "expected a field name, got %s", describe(n.Content[i]))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			d.addf(k, join(f.path, name), "given twice (first at line %d)", first.Line)
			continue
		}
		seen[name] = k
		if f.path == "" && strings.HasPrefix(name, "x-") {
			continue // an extension field: a place for anchors, as in Compose files
		}
		if !slices.Contains(known, name) {
			d.addf(k, join(f.path, name), "unknown field%s", unknownHint(name, known, sections))
			continue
		}
		if _, set := f.keys[name]; set {
			continue // given by the mapping that merges this one
		}
		f.keys[name] = k
		if v = deref(v); !isNull(v) {
			f.vals[name] = v
		}
	}
	for _, m := range merges {
		m = deref(m)
		if depth >= maxMergeDepth {
			d.addf(m, f.path, "merge keys (<<) nested more than %d deep", maxMergeDepth)
			return
		}
		items := []*yaml.Node{m}
		if m != nil && m.Kind == yaml.SequenceNode {
			items = m.Content
		}
		for _, item := range items {
			item = deref(item)
			if item == nil || item.Kind != yaml.MappingNode {
				d.addf(m, f.path, "expected a mapping or a list of mappings to merge (<<), got %s", describe(m))
				break
			}
			d.collect(f, item, known, sections, depth+1)
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

// sub reads the field name as a mapping.
func (f *fields) sub(name string, known []string, sections map[string][]string) *fields {
	return f.d.mapping(f.vals[name], f.node, join(f.path, name), known, sections)
}

// list reads the field name as a list, its items with aliases followed.
func (f *fields) list(name, want string) []*yaml.Node {
	v := f.vals[name]
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		f.d.addf(v, join(f.path, name), "expected a list of %s, got %s", want, describe(v))
		return nil
	}
	items := make([]*yaml.Node, 0, len(v.Content))
	for _, item := range v.Content {
		if !f.d.spend() {
			break
		}
		items = append(items, deref(item))
	}
	return items
}

// at is the node a problem with field name is reported at: its value, its
// key, or the mapping.
func (f *fields) at(name string) *yaml.Node {
	if v := f.vals[name]; v != nil {
		return v
	}
	if k := f.keys[name]; k != nil {
		return k
	}
	return f.node
}

func (f *fields) errorf(name, format string, args ...any) {
	f.d.addf(f.at(name), join(f.path, name), format, args...)
}

func (f *fields) missing(name, want string) {
	if f.bad {
		return
	}
	f.d.addf(f.node, join(f.path, name), "missing: expected %s", want)
}

// scalar is the text of field name when it is set and a scalar; a list or
// a mapping is reported as not being want.
func (f *fields) scalar(name, want string) (string, bool) {
	v := f.vals[name]
	if v == nil {
		return "", false
	}
	if v.Kind != yaml.ScalarNode {
		f.errorf(name, "expected %s, got %s", want, describe(v))
		return "", false
	}
	return v.Value, true
}

// str stores field name in dst if it is set and check accepts it.
func (f *fields) str(name string, dst *string, check func(string) error) bool {
	s, ok := f.scalar(name, "a string")
	if !ok {
		return false
	}
	if check != nil {
		if err := check(s); err != nil {
			f.errorf(name, "%v", err)
			return false
		}
	}
	*dst = s
	return true
}

// file is str for a file name: relative to the configuration file's
// directory.
func (f *fields) file(name string, dst *string) {
	if f.str(name, dst, nil) && *dst != "" && !filepath.IsAbs(*dst) {
		*dst = filepath.Join(f.d.dir, *dst)
	}
}

// integer stores field name in dst if it is an integer from lo to hi.
func (f *fields) integer(name string, dst *int64, lo, hi int64) bool {
	want := intRange(lo, hi)
	s, ok := f.scalar(name, want)
	if !ok {
		return false
	}
	var n int64
	var err error
	switch v := f.vals[name]; v.ShortTag() {
	case "!!int":
		err = v.Decode(&n) // 0x10, 1_000
	case "!!str":
		n, err = strconv.ParseInt(s, 10, 64)
	default:
		err = errors.New("not an integer")
	}
	if err != nil || n < lo || n > hi {
		f.errorf(name, "%v", expected(want, s))
		return false
	}
	*dst = n
	return true
}

// intField is integer for a field held in an int.
func (f *fields) intField(name string, dst *int, lo int64) bool {
	var n int64
	if !f.integer(name, &n, lo, maxInt) {
		return false
	}
	*dst = int(n)
	return true
}

func (f *fields) duration(name string, dst *time.Duration, positive bool) bool {
	s, ok := f.scalar(name, wantDuration)
	if !ok {
		return false
	}
	d, err := parseDuration(s, positive)
	if err != nil {
		f.errorf(name, "%v", err)
		return false
	}
	*dst = d
	return true
}

func (f *fields) rate(name string, dst *bucket.Rate) bool {
	s, ok := f.scalar(name, wantRate)
	if !ok {
		return false
	}
	r, err := parseRate(s)
	if err != nil {
		f.errorf(name, "%v", err)
		return false
	}
	*dst = r
	return true
}

func (f *fields) boolean(name string, dst *bool) bool {
	s, ok := f.scalar(name, "true or false")
	if !ok {
		return false
	}
	switch s {
	case "true", "True", "TRUE":
		*dst = true
	case "false", "False", "FALSE":
		*dst = false
	default:
		f.errorf(name, "%v", expected("true or false", s))
		return false
	}
	return true
}

func (f *fields) fraction(name string, dst *float64) bool {
	const want = "a number from 0 to 1"
	s, ok := f.scalar(name, want)
	if !ok {
		return false
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || !(x >= 0 && x <= 1) {
		f.errorf(name, "%v", expected(want, s))
		return false
	}
	*dst = x
	return true
}

// orDefault says ", the default" when field name is not given.
func orDefault(f *fields, name string) string {
	if f.vals[name] == nil {
		return ", the default"
	}
	return ""
}

// config reads the root mapping into c.
func (d *decoder) config(c *Config, root *yaml.Node) {
	if root = deref(root); root != nil && !isNull(root) && root.Kind != yaml.MappingNode {
		d.addf(root, "", "expected a mapping of %s, got %s", joinOr(rootFields, "and"), describe(root))
		return
	}
	f := d.mapping(root, nil, "", rootFields, rootSections)
	if f.node == nil {
		f.node = &yaml.Node{Line: 1} // an empty file: report missing fields at line 1
	}
	d.nats(&c.NATS, f.sub("nats", natsFields, nil))
	d.redis(&c.Redis, f.sub("redis", redisFields, nil))
	d.http(&c.HTTP, f.sub("http", httpFields, nil))
	w := f.sub("worker", workerFields, nil)
	w.intField("concurrency", &c.Worker.Concurrency, 1)
	w.duration("grace_period", &c.Worker.GracePeriod, false)
	w.duration("ack_wait", &c.Worker.AckWait, true)
	f.sub("status", statusFields, nil).duration("ttl", &c.Status.TTL, true)

	if f.vals["queues"] == nil {
		f.missing("queues", "a list of queues, at least one")
		return
	}
	items := f.list("queues", "queues")
	if len(items) == 0 && f.vals["queues"].Kind == yaml.SequenceNode {
		f.errorf("queues", "expected at least one queue, got an empty list")
	}
	first := map[string]int{} // queue name → line
	for i, item := range items {
		q, nameAt := d.queue(item, f.vals["queues"], fmt.Sprintf("queues[%d]", i), c.NATS.Replicas)
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

func (d *decoder) nats(c *NATS, f *fields) {
	f.str("url", &c.URL, checkNATSURL)
	f.str("listen", &c.Listen, checkListen)
	f.file("store_dir", &c.StoreDir)
	f.file("creds_file", &c.CredsFile)
	var replicas int64
	if f.integer("replicas", &replicas, 1, 5) {
		c.Replicas = int(replicas)
	}
}

func (d *decoder) redis(c *Redis, f *fields) {
	f.str("url", &c.URL, checkRedisURL)
	var mode string
	if f.str("failure_mode", &mode, func(s string) error { _, err := parseFailureMode(s); return err }) {
		c.FailureMode = FailureMode(mode)
	}
	f.duration("timeout", &c.Timeout, true)
}

func (d *decoder) http(c *HTTP, f *fields) {
	f.str("listen", &c.Listen, checkListen)
	f.integer("max_body_bytes", &c.MaxBodyBytes, 1, math.MaxInt64)
	f.file("api_keys_file", &c.APIKeysFile)
	for i, item := range f.list("trusted_proxies", "IP addresses or CIDR prefixes") {
		field := fmt.Sprintf("%s[%d]", join(f.path, "trusted_proxies"), i)
		if item == nil || item.Kind != yaml.ScalarNode || isNull(item) {
			d.addf(item, field, "expected %s, got %s", wantProxy, describe(item))
			continue
		}
		p, err := parseProxy(item.Value)
		if err != nil {
			d.addf(item, field, "%v", err)
			continue
		}
		c.TrustedProxies = append(c.TrustedProxies, p)
	}
}

// queue reads one item of queues. It returns the node of the name, where a
// duplicate name is reported.
func (d *decoder) queue(n, parent *yaml.Node, path string, replicas int) (Queue, *yaml.Node) {
	var q Queue
	if isNull(n) {
		d.addf(orNode(n, parent), path, "expected a queue (a mapping of %s), got nothing", joinOr(queueFields, "and"))
		return q, nil
	}
	before := len(d.errs)
	f := d.mapping(n, parent, path, queueFields, queueSections)
	if f.bad {
		return q, nil
	}
	if f.vals["name"] == nil {
		f.missing("name", wantQueue)
	} else {
		f.str("name", &q.Name, checkQueueName)
	}

	items := f.list("limits", "limit tiers")
	switch {
	case f.vals["limits"] == nil:
		f.missing("limits", `a list of limit tiers, such as [{key: global, rate: "10/s", burst: 20}]`)
	case len(items) == 0 && f.vals["limits"].Kind == yaml.SequenceNode:
		f.errorf("limits", "expected at least one limit tier, got an empty list")
	case len(items) > bucket.MaxTiers:
		f.errorf("limits", "expected at most %d limit tiers, got %d", bucket.MaxTiers, len(items))
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
		l, nameAt, ok := d.limit(item, f.vals["limits"], fmt.Sprintf("%s.limits[%d]", path, i))
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
	for name, g := range named {
		if j, clash := unnamed[name]; clash {
			d.addf(g.at, fmt.Sprintf("%s.limits[%d].name", path, g.tier),
				"tier name %q is the default name of limits[%d], which has no name; name that tier too, or choose another name", name, j)
		}
	}

	q.Backlog = d.backlog(f, q.Name, replicas)
	// READY's bound lives with the backlog's: both are the queue's stream
	// settings (queue.Config).
	f.sub("ready", readyFields, nil).integer("capacity", &q.Backlog.ReadyCapacity, 1, math.MaxInt64)
	q.Retry = d.retry(f.sub("retry", retryFields, nil))
	if f.vals["handler"] != nil {
		q.Handler = d.handler(f.sub("handler", handlerFields, handlerSections))
	}

	// The library validators check what the walk above already checked;
	// they run as a safety net once the queue is otherwise clean.
	if len(d.errs) == before {
		if err := q.Backlog.Validate(); err != nil {
			d.addf(f.at("backlog"), join(path, "backlog"), "%v", err)
		}
		if err := q.Retry.Validate(); err != nil {
			d.addf(f.at("retry"), join(path, "retry"), "%v", err)
		}
	}
	return q, f.at("name")
}

// limit reads one limit tier. It returns the node of the name, where a
// repeated name is reported.
func (d *decoder) limit(n, parent *yaml.Node, path string) (Limit, *yaml.Node, bool) {
	var l Limit
	if isNull(n) {
		d.addf(orNode(n, parent), path, "expected a limit tier (a mapping of %s), got nothing", joinOr(limitFields, "and"))
		return l, nil, false
	}
	before := len(d.errs)
	f := d.mapping(n, parent, path, limitFields, nil)
	if f.bad {
		return l, nil, false
	}
	if f.vals["key"] == nil {
		f.missing("key", wantKey)
	} else if s, ok := f.scalar("key", wantKey); ok {
		k, err := parseKey(s)
		if err != nil {
			f.errorf("key", "%v", err)
		}
		l.Key = k
	}
	f.str("name", &l.Name, checkTierName)
	l.OnMissing = MissingReject
	var missing string
	if f.str("on_missing", &missing, func(s string) error { _, err := parseOnMissing(s); return err }) {
		switch {
		case l.Key.Kind == KeyHeader:
			l.OnMissing = OnMissing(missing)
		case f.vals["key"] != nil:
			f.errorf("on_missing", "applies to header:NAME keys only, not to %s", l.Key)
		}
	}

	var spec bucket.Spec
	alg := bucket.LeakyBucket
	if f.str("algorithm", &spec.Algorithm, nil) {
		a, err := bucket.ParseAlgorithm(spec.Algorithm)
		if err != nil {
			f.errorf("algorithm", "%v", withSuggestion(
				expected("one of leaky_bucket, token_bucket, fixed_window, sliding_log or sliding_window", spec.Algorithm),
				spec.Algorithm, []string{"leaky_bucket", "token_bucket", "fixed_window", "sliding_log", "sliding_window"}))
			return l, f.at("name"), false
		}
		alg = a
	}

	takes := map[bucket.Algorithm][]string{
		bucket.LeakyBucket: {"rate", "burst", "delay", "nodelay"},
		bucket.TokenBucket: {"rate", "burst"},
	}[alg]
	if takes == nil {
		takes = []string{"limit", "window"}
	}
	for _, name := range []string{"rate", "burst", "delay", "nodelay", "limit", "window"} {
		if f.vals[name] != nil && !slices.Contains(takes, name) {
			f.errorf(name, "%s takes %s, not %s", alg, joinOr(takes, "and"), name)
		}
	}
	switch alg {
	case bucket.LeakyBucket, bucket.TokenBucket:
		var r bucket.Rate
		if f.vals["rate"] == nil {
			f.missing("rate", wantRate)
		} else if f.rate("rate", &r) {
			spec.Rate = f.vals["rate"].Value
		}
		if alg == bucket.TokenBucket && f.vals["burst"] == nil {
			f.missing("burst", "the token bucket's capacity, an integer ≥ 1")
		}
		f.integer("burst", &spec.Burst, 0, math.MaxInt64)
		f.integer("delay", &spec.Delay, 0, math.MaxInt64)
		f.boolean("nodelay", &spec.NoDelay)
	default:
		if f.vals["limit"] == nil {
			f.missing("limit", "an integer ≥ 1, the units allowed per window")
		}
		f.integer("limit", &spec.Limit, 1, math.MaxInt64)
		var w time.Duration
		if f.vals["window"] == nil {
			f.missing("window", wantDuration)
		} else if f.duration("window", &w, true) {
			spec.Window = f.vals["window"].Value
		}
	}
	if len(d.errs) > before {
		return l, f.at("name"), false
	}

	built, err := spec.Build()
	if err != nil {
		var le *bucket.LimitError
		if !errors.As(err, &le) {
			f.d.addf(f.node, path, "%v", err)
			return l, f.at("name"), false
		}
		problem := le.Reason
		if le.Value != "" {
			problem += ", got " + le.Value
		}
		f.errorf(le.Field, "%s", problem)
		return l, f.at("name"), false
	}
	l.Limit = built
	return l, f.at("name"), true
}

// backlog reads the backlog section of queue q. A backlog needs a leak
// rate: the worker refuses a queue whose backlog would never drain.
func (d *decoder) backlog(q *fields, name string, replicas int) queue.Config {
	cfg := queue.Config{
		Name:            name,
		Capacity:        queue.DefaultCapacity,
		ReadyCapacity:   queue.DefaultReadyCapacity,
		Replicas:        replicas,
		DuplicateWindow: queue.DefaultDuplicateWindow,
	}
	f := q.sub("backlog", backlogFields, nil)
	capOK := f.vals["capacity"] == nil || f.integer("capacity", &cfg.Capacity, 1, math.MaxInt64)
	if f.integer("per_key_capacity", &cfg.PerKeyCapacity, 0, math.MaxInt64) && capOK && cfg.PerKeyCapacity > cfg.Capacity {
		f.errorf("per_key_capacity", "expected at most capacity (%d%s), got %d",
			cfg.Capacity, orDefault(f, "capacity"), cfg.PerKeyCapacity)
	}
	if f.vals["leak_rate"] == nil {
		f.missing("leak_rate", `a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one`)
	} else {
		f.rate("leak_rate", &cfg.LeakRate)
	}
	f.duration("max_age", &cfg.MaxAge, false)
	f.duration("duplicate_window", &cfg.DuplicateWindow, true)
	return cfg
}

func (d *decoder) retry(f *fields) retry.Policy {
	p := retry.Policy{
		MaxAttempts: retry.DefaultMaxAttempts,
		Initial:     retry.DefaultInitial,
		Max:         retry.DefaultMax,
		Jitter:      retry.DefaultJitter,
	}
	f.intField("max_attempts", &p.MaxAttempts, 1)
	initialOK := f.vals["initial"] == nil || f.duration("initial", &p.Initial, true)
	maxOK := f.vals["max"] == nil || f.duration("max", &p.Max, true)
	switch {
	case !initialOK || !maxOK || p.Initial <= p.Max:
	case f.vals["initial"] != nil:
		f.errorf("initial", "expected at most max (%v%s), got %v", p.Max, orDefault(f, "max"), p.Initial)
	default:
		f.errorf("max", "expected at least initial (%v, the default), got %v", p.Initial, p.Max)
	}
	if f.fraction("jitter", &p.Jitter) && p.Jitter == 0 {
		p.Jitter = -1 // retry.Policy: 0 is the default, negative is none
	}
	return p
}

// handler reads a queue's handler: exactly one of http, nats and log: true.
func (d *decoder) handler(f *fields) Handler {
	var h Handler
	var kinds []string
	if f.vals["http"] != nil {
		kinds = append(kinds, "http")
		h.HTTP = d.httpHandler(f.sub("http", httpHandlerFields, nil))
	}
	if f.vals["nats"] != nil {
		kinds = append(kinds, "nats")
		h.NATS = d.natsHandler(f.sub("nats", natsHandlerFields, nil))
	}
	if f.boolean("log", &h.Log) && h.Log {
		kinds = append(kinds, "log")
	}
	switch len(kinds) {
	case 0:
		d.addf(f.node, f.path, "expected one of http, nats or log: true (leave handler out for an admit-only queue)")
	case 1:
	default:
		d.addf(f.node, f.path, "expected one kind of handler, got %s", joinOr(kinds, "and"))
	}
	return h
}

func (d *decoder) httpHandler(f *fields) *HTTPHandler {
	h := &HTTPHandler{Timeout: DefaultHandlerTimeout}
	if f.vals["url"] == nil {
		f.missing("url", wantHTTPURL)
	} else {
		f.str("url", &h.URL, checkHTTPURL)
	}
	f.duration("timeout", &h.Timeout, true)

	n := f.vals["headers"]
	if n == nil {
		return h
	}
	path := join(f.path, "headers")
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "expected a mapping of header names to values, got %s", describe(n))
		return h
	}
	h.Headers = map[string]string{}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !d.spend() {
			break
		}
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			d.addf(n.Content[i], path, "expected a header name, got %s", describe(n.Content[i]))
			continue
		}
		field := join(path, k.Value)
		name, err := headerName(k.Value)
		if err != nil {
			d.addf(k, field, "%v", err)
			continue
		}
		if line, dup := first[name]; dup {
			d.addf(k, field, "header %s is already given at line %d", name, line)
			continue
		}
		first[name] = k.Line
		if isNull(v) || v.Kind != yaml.ScalarNode {
			d.addf(n.Content[i+1], field, "expected a header value, got %s", describe(n.Content[i+1]))
			continue
		}
		if err := checkHeaderValue(v.Value); err != nil {
			d.addf(v, field, "%v", err)
			continue
		}
		h.Headers[name] = v.Value
	}
	return h
}

func (d *decoder) natsHandler(f *fields) *NATSHandler {
	h := &NATSHandler{Timeout: DefaultHandlerTimeout}
	if f.vals["subject"] == nil {
		f.missing("subject", wantSubject)
	} else {
		f.str("subject", &h.Subject, checkSubject)
	}
	f.duration("timeout", &h.Timeout, true)
	return h
}
