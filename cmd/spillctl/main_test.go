package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func spillctl(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, func(string) string { return "" }, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

// startAdmitter starts an admitter with o (its log discarded unless o
// has a Logger) and shuts it down when the test ends.
func startAdmitter(t *testing.T, o admitterd.Options) *admitterd.Service {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	svc, err := admitterd.Start(t.Context(), o)
	if err != nil {
		t.Fatalf("starting the admitter: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return svc
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"help"}, {"simulate", "--help"}, {"simulate", "-h"}} {
		out, _, err := spillctl(t, "", args...)
		if err != nil || !strings.Contains(out, "Usage") {
			t.Errorf("spillctl %v: %v, output %q", args, err, out)
		}
	}
	if out, _, _ := spillctl(t, "", "simulate", "--help"); !strings.Contains(out, "--nodelay") || !strings.Contains(out, "Examples") {
		t.Errorf("simulate --help lacks its flags or examples:\n%s", out)
	}
}

// The README's example, verbatim: nginx's limit_req burst=5 at 1r/s.
func TestSimulateReadmeExample(t *testing.T) {
	t.Parallel()
	out, _, err := spillctl(t, strings.Repeat("0\n", 10), "simulate", "--algorithm", "leaky_bucket", "--rate", "1/s", "--burst", "5")
	if err != nil {
		t.Fatal(err)
	}
	want := "1 0 admitted\n2 0 queued 1.000\n3 0 queued 2.000\n4 0 queued 3.000\n5 0 queued 4.000\n6 0 queued 5.000\n" +
		"7 0 rejected\n8 0 rejected\n9 0 rejected\n10 0 rejected\n"
	if out != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
}

// Every bad flag gets one line naming it.
func TestSimulateBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"simulate", "--rate", "10/x"}, "--rate 10/x: unit \"x\""},
		{[]string{"simulate", "--rate", "1/s", "--burst", "-1"}, "--burst -1: must be ≥ 0"},
		{[]string{"simulate", "--rate", "1/s", "--burst", "2", "--delay", "3"}, "--delay 3: must be between 0 and burst (2)"},
		{[]string{"simulate", "--algorithm", "gcra", "--rate", "1/s"}, "--algorithm gcra: want one of"},
		{[]string{"simulate"}, "--rate: leaky_bucket needs a rate"},
		{[]string{"simulate", "--algorithm", "sliding_window", "--limit", "5"}, "--window: sliding_window needs a window"},
		{[]string{"simulate", "--rate", "1/s", "--store", "disk"}, "--store \"disk\": want memory or redis"},
		{[]string{"simulate", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"simulate", "--burst", "many"}, "invalid value \"many\" for flag -burst"},
		{[]string{"simulate", "--rate", "1/s", "arrivals.txt"}, "unexpected argument \"arrivals.txt\""},
		{[]string{"simulate", "--rate", "1/s", "--store", "redis", "--redis", "http://x"}, "--redis \"http://x\""},
		{[]string{"simulat"}, "unknown command \"simulat\""},
	} {
		_, _, err := spillctl(t, "0\n", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("spillctl %v: error %v, want one line containing %q", c.args, err, c.says)
		}
	}
	if _, _, err := spillctl(t, "0\nbad\n", "simulate", "--rate", "1/s"); err == nil || !strings.Contains(err.Error(), "input line 2") {
		t.Errorf("bad input line: %v", err)
	}
}

// The Redis scripts print exactly the lines the memory store prints, for
// every algorithm, on arrivals with bursts, idle gaps and several keys.
func TestSimulateStoresPrintIdenticalLines(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for i, flags := range [][]string{
		{"--algorithm", "leaky_bucket", "--rate", "1/s", "--burst", "5"},
		{"--algorithm", "leaky_bucket", "--rate", "5/s", "--burst", "12", "--delay", "8"},
		{"--algorithm", "leaky_bucket", "--rate", "10/s", "--burst", "20", "--nodelay"},
		{"--algorithm", "leaky_bucket", "--rate", "3/s", "--burst", "4", "--delay", "1"},
		{"--algorithm", "token_bucket", "--rate", "2/s", "--burst", "5"},
		{"--algorithm", "fixed_window", "--limit", "4", "--window", "1s"},
		{"--algorithm", "sliding_log", "--limit", "4", "--window", "1500ms"},
		{"--algorithm", "sliding_window", "--limit", "6", "--window", "2s"},
	} {
		in := arrivals(uint64(i), 400)
		args := append([]string{"simulate", "--summary"}, flags...)
		mem, _, err := spillctl(t, in, args...)
		if err != nil {
			t.Fatalf("%v memory: %v", flags, err)
		}
		red, _, err := spillctl(t, in, append(args, "--store", "redis", "--redis", srv.URL())...)
		if err != nil {
			t.Fatalf("%v redis: %v", flags, err)
		}
		if mem != red {
			t.Fatalf("%v: memory and redis differ:\n%s", flags, firstDiff(mem, red))
		}
		if n := strings.Count(mem, "\n"); n < 400 {
			t.Fatalf("%v: %d lines for 400 arrivals", flags, n)
		}
	}
}

// arrivals makes a timeline of bursts and gaps over three keys, starting
// off any second boundary, with times to the nanosecond.
func arrivals(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	ns := int64(1_763_812_800_123_456_789)
	for range n {
		switch rng.IntN(10) {
		case 0:
			ns += rng.Int64N(5e9)
		case 1, 2, 3:
		default:
			ns += rng.Int64N(3e8)
		}
		fmt.Fprintf(&b, "%d.%09d k%d\n", ns/1e9, ns%1e9, rng.IntN(3))
	}
	return b.String()
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n memory: %s\n  redis: %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(al), len(bl))
}
