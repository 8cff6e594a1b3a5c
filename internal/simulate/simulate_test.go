package simulate_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/simulate"
	"github.com/spillway-dev/spillway/pkg/bucket"
)

func simulateMemory(t *testing.T, spec bucket.Spec, summary bool, in string) (string, error) {
	t.Helper()
	l, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	store, err := bucket.NewMemory(bucket.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	sim := &simulate.Simulator{Limit: l, Store: store, SetClock: func(t time.Time) { now.Store(t.UnixNano()) }, Summary: summary}
	var out strings.Builder
	err = sim.Run(context.Background(), strings.NewReader(in), &out)
	return out.String(), err
}

func TestSimulateNginxDocumentedOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		spec bucket.Spec
		in   string
		want string
	}{{
		// limit_req zone=one burst=5 at rate=1r/s (nginx documentation).
		name: "burst",
		spec: bucket.Spec{Rate: "1/s", Burst: 5},
		in:   strings.Repeat("0\n", 10),
		want: "1 0 admitted\n2 0 queued 1.000\n3 0 queued 2.000\n4 0 queued 3.000\n5 0 queued 4.000\n6 0 queued 5.000\n" +
			"7 0 rejected\n8 0 rejected\n9 0 rejected\n10 0 rejected\n",
	}, {
		name: "nodelay",
		spec: bucket.Spec{Rate: "1/s", Burst: 2, NoDelay: true},
		in:   "0\n0\n0\n0\n0.5\n1\n1.5 # a comment\n\n# a comment line\n3\n",
		want: "1 0 admitted\n2 0 admitted\n3 0 admitted\n4 0 rejected\n5 0.5 rejected\n6 1 admitted\n7 1.5 rejected\n8 3 admitted\n",
	}, {
		name: "two_stage",
		spec: bucket.Spec{Rate: "5/s", Burst: 12, Delay: 8},
		in:   strings.Repeat("10.25\n", 14),
		want: "1 10.25 admitted\n2 10.25 admitted\n3 10.25 admitted\n4 10.25 admitted\n5 10.25 admitted\n6 10.25 admitted\n" +
			"7 10.25 admitted\n8 10.25 admitted\n9 10.25 admitted\n10 10.25 queued 10.450\n11 10.25 queued 10.650\n" +
			"12 10.25 queued 10.850\n13 10.25 queued 11.050\n14 10.25 rejected\n",
	}, {
		name: "keys",
		spec: bucket.Spec{Rate: "1/s"},
		in:   "0 alice\n0 bob\n0 alice\n1 alice\n",
		want: "1 0 admitted\n2 0 admitted\n3 0 rejected\n4 1 admitted\n",
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := simulateMemory(t, c.spec, false, c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func TestSimulateSummary(t *testing.T) {
	t.Parallel()
	got, err := simulateMemory(t, bucket.Spec{Rate: "1/s", Burst: 5}, true, strings.Repeat("0\n", 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# 10 arrivals: 1 admitted, 5 queued, 4 rejected\n",
		"# deepest queue: 5 jobs waiting (at 0)\n",
		"# wait of queued jobs: p50 3.000s p90 5.000s p99 5.000s max 5.000s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

func TestSimulateBadInputNamesTheLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, says string
		printed  int // arrivals answered before the bad line
	}{
		{"0\n1\nabc\n", "line 3: time \"abc\"", 2},
		{"0\n\n# c\n2\n1\n", "line 5: time 1 is before the previous line's", 2},
		{"-1\n", "line 1: time \"-1\"", 0},
		{"1.0000000001\n", "line 1: time \"1.0000000001\": at most 9 decimals", 0},
		{"1 a b\n", "line 1: 3 fields", 0},
		{"99999999999\n", "line 1: time \"99999999999\"", 0},
		{".\n", "line 1: time \".\"", 0},
		{"1e3\n", "line 1: time \"1e3\"", 0},
	} {
		out, err := simulateMemory(t, bucket.Spec{Rate: "1/s"}, false, c.in)
		var ie *simulate.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("input %q: error %v, want one line saying %q", c.in, err, c.says)
		}
		if lines := strings.Count(out, "\n"); lines != c.printed {
			t.Errorf("input %q: %d lines printed before the error, want %d", c.in, lines, c.printed)
		}
	}
}

func TestParseSecondsIsExact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1": 1e9, "1.5": 1_500_000_000, "0.000000001": 1, "12.": 12e9, ".25": 250_000_000,
		"1763812800.123456789": 1763812800123456789,
	} {
		got, err := simulate.ParseSeconds(in)
		if err != nil || got != want {
			t.Errorf("ParseSeconds(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if got := simulate.FormatSeconds(1_000_000_001); got != "1.001" {
		t.Errorf("FormatSeconds rounds a start up, never early: got %s, want 1.001", got)
	}
}

// FuzzParser: no input panics; every line is an arrival or an *InputError.
func FuzzParser(f *testing.F) {
	f.Add("0\n0.5 alice\n# c\n\n1.000000001 bob # c\n")
	f.Add("1 2 3\n")
	f.Add("\xff\xfe 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		p := simulate.NewParser(strings.NewReader(in))
		last := int64(-1)
		for range 10_000 {
			a, err := p.Next()
			if err != nil {
				var ie *simulate.InputError
				if err.Error() != "EOF" && !errors.As(err, &ie) {
					t.Fatalf("error %T %v", err, err)
				}
				return
			}
			if a.At < last || a.At < 0 || a.Key == "" {
				t.Fatalf("arrival %+v after %d", a, last)
			}
			last = a.At
		}
	})
}
