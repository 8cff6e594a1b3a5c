package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/admitterd"
)

// benchConfig is scripts/bench-admission's queue, in dev mode (with a
// handler, which dev mode needs): a limit that admits everything, so that
// every job is decided, stored and answered admitted.
const benchConfig = `
nats: {listen: "127.0.0.1:0", store_dir: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: bench
    limits:
      - {key: "header:X-Api-Key", algorithm: leaky_bucket, rate: 1000000/s, burst: 1000000, nodelay: true}
    backlog: {capacity: 1000, leak_rate: 1/s}
    ready: {capacity: 100000000}
    handler: {log: true}
`

// spillctl bench over HTTP with the lean transport against a real
// admitter gives the verdicts the standard transport gives: every job
// admitted, none failed, in the closed and the open loop.
func TestBenchLeanTransport(t *testing.T) {
	t.Parallel()
	svc := startAdmitter(t, admitterd.Options{Config: admittest.LoadConfig(t, fmt.Sprintf(benchConfig, t.TempDir())), Dev: true})
	server := "http://" + svc.HTTPAddr()
	for _, load := range []struct {
		args []string
		jobs int64
	}{
		{[]string{"--callers", "8", "--count", "400"}, 400},
		{[]string{"--rate", "500/s", "--count", "100"}, 100},
	} {
		for _, transport := range []string{"lean", "std"} {
			args := append([]string{"bench", "--queue", "bench", "--via", "http", "--server", server, "--http-transport", transport,
				"--keys", "10", "--payload-bytes", "256", "--quiet", "--json"}, load.args...)
			out, stderr, err := spillctl(t, "", args...)
			if err != nil {
				t.Fatalf("spillctl %s: %v\n%s", strings.Join(args, " "), err, stderr)
			}
			var sum benchSummary
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			v := sum.Verdicts
			if sum.Sent != load.jobs || v.Admitted != load.jobs || v.Queued != 0 || v.Rejected != 0 || v.Errors != 0 || sum.HTTPTransport != transport {
				t.Fatalf("%s transport, %v: sent %d, verdicts %+v, http_transport %q; want all %d admitted",
					transport, load.args, sum.Sent, v, sum.HTTPTransport, load.jobs)
			}
		}
	}
}

// A bad --http-transport, or lean with an https:// server, is a usage
// error naming the flag.
func TestBenchHTTPTransportFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--http-transport", "fast"}, `--http-transport "fast": want std or lean`},
		{[]string{"--http-transport", "lean", "--server", "https://127.0.0.1:1"}, "--http-transport lean speaks plain http:// only"},
	} {
		_, _, err := spillctl(t, "", append([]string{"bench", "--count", "1", "--quiet"}, c.args...)...)
		if !errorsIsUsage(err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("bench %v: %v, want a usage error saying %q", c.args, err, c.says)
		}
	}
}
