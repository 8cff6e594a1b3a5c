// Package manyqueues_test runs an admitter with many queues, in a process
// of its own: making hundreds of streams would starve the timing-sensitive
// tests of package admitterd.
package manyqueues_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// manyQueues is how many queues TestManyQueues configures: a thousand
// with SPILLWAY_RELIABILITY=full; by default fewer, since making and
// removing the streams of a thousand queues takes most of a minute.
func manyQueues() int {
	if buckettest.ReliabilityFull() {
		return 1000
	}
	return 100
}

// TestManyQueues: an admitter with a thousand idle queues answers /metrics
// and GET /v1/queues from one shared snapshot, read in a few dozen
// JetStream requests rather than seven a queue, and polls next to nothing
// while idle. The request counts are the check by default (they do not
// depend on the machine's speed); the CPU figure is checked with
// SPILLWAY_RELIABILITY=full only, since it does.
func TestManyQueues(t *testing.T) {
	manyQueues := manyQueues()
	srv := queuetest.Start(t)
	var b strings.Builder
	fmt.Fprintf(&b, "nats: {url: %q}\nhttp: {listen: \"127.0.0.1:0\"}\nqueues:\n", srv.URL())
	for i := range manyQueues {
		fmt.Fprintf(&b, "  - {name: q%04d, limits: [{key: \"header:X-Client\", rate: 10/s}], backlog: {capacity: 10, leak_rate: 1/s}}\n", i)
	}
	began := time.Now()
	s := start(t, admittest.LoadConfig(t, b.String()))
	t.Logf("figure: admitter start with %d queues: %v", manyQueues, time.Since(began).Round(time.Millisecond))

	requests := func() int64 {
		in, _, _, err := srv.Traffic("spillway-admitter")
		if err != nil {
			t.Fatal(err)
		}
		return in // what the admitter sent: its requests and publishes
	}
	get := func(path string) (time.Duration, string) {
		t.Helper()
		began := time.Now()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.HTTPAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v: %.300s", path, resp.StatusCode, err, body)
		}
		return time.Since(began), string(body)
	}

	// The first snapshot reads every queue's consumers once.
	took, body := get("/v1/queues")
	if n := strings.Count(body, `"name":"q`); n != manyQueues {
		t.Fatalf("GET /v1/queues lists %d queues, want %d", n, manyQueues)
	}
	t.Logf("figure: first GET /v1/queues, %d queues: %v", manyQueues, took.Round(time.Millisecond))

	// Later ones, idle: the stream list's pages and one listing of the
	// pause entries; no queue's consumers (they cannot have changed).
	time.Sleep(1100 * time.Millisecond) // past the snapshot's MaxAge
	before := requests()
	took, _ = get("/v1/queues")
	perRefresh := requests() - before
	t.Logf("figure: GET /v1/queues, %d idle queues, refreshed: %v, %d messages to JetStream", manyQueues, took.Round(time.Millisecond), perRefresh)
	took, body = get("/metrics")
	again, _ := get("/metrics")
	t.Logf("figure: GET /metrics right after: %v, and again: %v (%d lines, %d KiB)", took.Round(time.Millisecond),
		again.Round(time.Millisecond), strings.Count(body, "\n"), len(body)>>10)
	if last := fmt.Sprintf(`spillway_queue_depth{queue="q%04d"} 0`, manyQueues-1); !strings.Contains(body, last) {
		t.Errorf("/metrics has no %s", last)
	}
	// Three streams a queue (four once workers ran) in pages of 256; the
	// pacers' bucket and its listing a few more; a position sweep may fall
	// in between. Per queue it would be thousands.
	if perRefresh > 60 {
		t.Errorf("a refresh of %d idle queues sent %d messages to JetStream, want at most 60", manyQueues, perRefresh)
	}
	if took > 5*time.Second { // generous: the bound that matters is the figure
		t.Errorf("GET /metrics took %v", took)
	}

	// Idle: nothing asked, nothing submitted.
	idle := 3 * time.Second
	if buckettest.ReliabilityFull() {
		idle = 30 * time.Second
	}
	before, cpu0, at := requests(), cpuTime(t), time.Now()
	time.Sleep(idle)
	sent, used, elapsed := requests()-before, cpuTime(t)-cpu0, time.Since(at)
	share := used.Seconds() / elapsed.Seconds()
	t.Logf("figure: idle admitter with %d queues: %d messages to JetStream in %v; CPU of the test process (admitter and JetStream server) %.2f%% of a core",
		manyQueues, sent, elapsed.Round(time.Millisecond), 100*share)
	// A position sweep (a page per 256 backlogs) every 10s, no per-queue polling.
	if limit := int64(10 + 2*elapsed/time.Second); sent > limit {
		t.Errorf("idle for %v, the admitter sent %d messages to JetStream, want at most %d", elapsed, sent, limit)
	}
	if buckettest.ReliabilityFull() && share > 0.03 {
		t.Errorf("idle, the process used %.2f%% of a core, want at most 3%%", 100*share)
	}
}

// cpuTime is the CPU time this process has used so far (user and system,
// from /proc/self/stat).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ticks int64
	for _, i := range []int{11, 12} { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

func start(t *testing.T, cfg *config.Config) *admitterd.Service {
	t.Helper()
	s, err := admitterd.Start(t.Context(), admitterd.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}
