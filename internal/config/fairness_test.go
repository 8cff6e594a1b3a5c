package config

import (
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// backlog.fairness: weights by key or key prefix (KEY*), and min_share as
// a fraction or a percentage, into queue.Config.Fairness.
func TestFairness(t *testing.T) {
	t.Parallel()
	if f := mustLoad(t, minimal).Queues[0].Backlog.Fairness; !reflect.DeepEqual(f, queue.Fairness{}) {
		t.Errorf("no fairness section: %+v, want the zero value", f)
	}
	src := strings.Replace(minimal, "backlog: {leak_rate: 1/s}", `backlog:
      leak_rate: 1/s
      fairness:
        weights: {"*": 5, "tenant-*": 3, "tenant-a": 2, "t*": 4, "alpha": 6}
        min_share: 10%`, 1)
	f := mustLoad(t, src).Queues[0].Backlog.Fairness
	// Exact keys first (by key), then prefixes, the longest first: the
	// first rule that matches is the most specific one, whatever the
	// file's order.
	want := queue.Fairness{MinShare: 0.1, Weights: []queue.WeightRule{
		{KeyPattern: queue.KeyPattern{Key: "alpha"}, Weight: 6},
		{KeyPattern: queue.KeyPattern{Key: "tenant-a"}, Weight: 2},
		{KeyPattern: queue.KeyPattern{Key: "tenant-", Prefix: true}, Weight: 3},
		{KeyPattern: queue.KeyPattern{Key: "t", Prefix: true}, Weight: 4},
		{KeyPattern: queue.KeyPattern{Key: "", Prefix: true}, Weight: 5},
	}}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("fairness:\n got %+v\nwant %+v", f, want)
	}
	for key, w := range map[string]int{"tenant-a": 2, "tenant-b": 3, "tx": 4, "other": 5, "alpha": 6, "alphabet": 5} {
		if got := f.WeightOf(key); got != w {
			t.Errorf("WeightOf(%q) = %d, want %d", key, got, w)
		}
	}
	for _, share := range []string{"0.25", "25%", "25 %"} {
		s := strings.Replace(minimal, "backlog: {leak_rate: 1/s}", "backlog: {leak_rate: 1/s, fairness: {min_share: "+share+"}}", 1)
		if got := mustLoad(t, s).Queues[0].Backlog.Fairness.MinShare; got != 0.25 {
			t.Errorf("min_share %s: %v, want 0.25", share, got)
		}
	}
}

func TestFairnessProblems(t *testing.T) {
	t.Parallel()
	fair := func(section string) string {
		return strings.Replace(minimal, "backlog: {leak_rate: 1/s}", "backlog:\n      leak_rate: 1/s\n      fairness:\n"+section, 1)
	}
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"weight 0", fair("        weights: {tenant-a: 0}\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.weights["tenant-a"]: expected an integer from 1 to 1000, got "0"`}},
		{"weight too large", fair("        weights:\n          ok: 2\n          \"tenant-*\": 1001\n"),
			[]string{`spillway.yaml:9: queues[0].backlog.fairness.weights["tenant-*"]: expected an integer from 1 to 1000, got "1001"`}},
		{"weight not a number", fair("        weights: {tenant-a: heavy}\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.weights["tenant-a"]: expected an integer from 1 to 1000, got "heavy"`}},
		{"weights not a mapping", fair("        weights: [a, b]\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.weights: expected a mapping of keys (or prefixes ending in *) to weights, got a list`}},
		{"key given twice", fair("        weights:\n          a: 2\n          a: 3\n"),
			[]string{`spillway.yaml:9: queues[0].backlog.fairness.weights["a"]: given twice (first at line 8)`}},
		{"empty key", fair("        weights: {\"\": 2}\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.weights[""]: expected a key, or a prefix ending in * ("*" alone: every key)`}},
		{"min_share too large", fair("        min_share: 0.6\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.min_share: expected a share from 0 to 0.5 (0% to 50%), got "0.6"`}},
		{"min_share percentage too large", fair("        min_share: 60%\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.min_share: expected a share from 0 to 0.5 (0% to 50%), got "60%"`}},
		{"min_share negative", fair("        min_share: -0.1\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.min_share: expected a share from 0 to 0.5 (0% to 50%), got "-0.1"`}},
		{"min_share not a number", fair("        min_share: some\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.min_share: expected a share from 0 to 0.5 (0% to 50%), got "some"`}},
		{"min_share NaN", fair("        min_share: .nan\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.min_share: expected a share from 0 to 0.5 (0% to 50%), got ".nan"`}},
		{"unknown field", fair("        weight: {a: 2}\n"),
			[]string{`spillway.yaml:7: queues[0].backlog.fairness.weight: unknown field (did you mean weights?)`}},
		{"both wrong", fair("        weights: {a: 2, b: 0}\n        min_share: 1\n"),
			[]string{
				`spillway.yaml:7: queues[0].backlog.fairness.weights["b"]: expected an integer from 1 to 1000, got "0"`,
				`spillway.yaml:8: queues[0].backlog.fairness.min_share: expected a share from 0 to 0.5 (0% to 50%), got "1"`,
			}},
	} {
		got := problems(t, c.src)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, strings.Join(got, "\n     "), strings.Join(c.want, "\n     "))
		}
	}
}

// queue.Config.ValidateGiven owns the rules: a program that builds a
// Config without a file gets the same bounds, each naming its field.
func TestFairnessValidateGiven(t *testing.T) {
	t.Parallel()
	c := queue.Config{Name: "q", LeakRate: mustLoad(t, minimal).Queues[0].Backlog.LeakRate, Fairness: queue.Fairness{
		MinShare: 0.7,
		Weights:  []queue.WeightRule{{KeyPattern: queue.KeyPattern{Key: "a"}, Weight: 2}, {KeyPattern: queue.KeyPattern{Key: "t-", Prefix: true}, Weight: queue.MaxWeight + 1}},
	}}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate: nil, want the weight and the share refused")
	}
	for _, want := range []string{`fairness.weights["t-*"] 1001: expected an integer from 1 to 1000`, `fairness.min_share 0.7: expected a share from 0 to 0.5`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nwant it to say %s", err, want)
		}
	}
}

// http.show_raw_keys: a boolean, default false.
func TestShowRawKeys(t *testing.T) {
	t.Parallel()
	if mustLoad(t, minimal).HTTP.ShowRawKeys {
		t.Error("show_raw_keys is on by default")
	}
	if !mustLoad(t, "http: {show_raw_keys: true}\n"+minimal).HTTP.ShowRawKeys {
		t.Error("show_raw_keys: true is off")
	}
	want := []string{`spillway.yaml:1: http.show_raw_keys: expected true or false, got "maybe"`}
	if got := problems(t, "http: {show_raw_keys: maybe}\n"+minimal); !slices.Equal(got, want) {
		t.Errorf("show_raw_keys: maybe:\n got %v\nwant %v", got, want)
	}
}

// http.show_raw_keys is refused beside a tier keyed on a credential
// header, in any case: the listing would show the credentials. The
// problem is at the tier's key and names the show_raw_keys line.
func TestShowRawKeysRefusesCredentials(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"X-Api-Key", "authorization", "Proxy-Authorization", "COOKIE"} {
		src := "http: {show_raw_keys: true}\nqueues:\n  - name: q\n    limits:\n      - {key: \"header:" + header + "\", rate: 10/s, burst: 10}\n    backlog: {leak_rate: 1/s}\n"
		want := []string{`spillway.yaml:5: queues[0].limits[0].key: keys on ` + textproto.CanonicalMIMEHeaderKey(header) +
			`, a credential, while http.show_raw_keys is true (line 1), which would list its raw values in GET /v1/queues/{queue}/keys: set show_raw_keys to false, or key the tier on another header`}
		if got := problems(t, src); !slices.Equal(got, want) {
			t.Errorf("header:%s with show_raw_keys:\n got %v\nwant %v", header, got, want)
		}
		mustLoad(t, strings.Replace(src, "show_raw_keys: true", "show_raw_keys: false", 1))
	}
	mustLoad(t, "http: {show_raw_keys: true}\nqueues:\n  - name: q\n    limits:\n      - {key: \"header:X-Tenant\", rate: 10/s, burst: 10}\n    backlog: {leak_rate: 1/s}\n")
}

// nats.reply_prefix: default _INBOX.; a subject prefix ending with a dot,
// without wildcards.
func TestReplyPrefix(t *testing.T) {
	t.Parallel()
	if got := mustLoad(t, minimal).NATS.ReplyPrefix; got != DefaultReplyPrefix {
		t.Errorf("default %q, want %q", got, DefaultReplyPrefix)
	}
	if got := mustLoad(t, "nats: {reply_prefix: _R.tenant.}\n"+minimal).NATS.ReplyPrefix; got != "_R.tenant." {
		t.Errorf("reply_prefix %q, want _R.tenant.", got)
	}
	for _, bad := range []string{`""`, "_INBOX", "_INBOX.*.", "_INBOX.>", "a b.", ".x.", "a..b."} {
		want := `spillway.yaml:1: nats.reply_prefix: expected a subject prefix ending with "." without wildcards, such as "_INBOX."`
		got := problems(t, "nats: {reply_prefix: "+bad+"}\n"+minimal)
		if len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("reply_prefix %s: %v, want %s", bad, got, want)
		}
	}
}
