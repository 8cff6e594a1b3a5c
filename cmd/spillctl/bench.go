package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/internal/leanhttp"
	"github.com/spillway-dev/spillway/internal/loadgen"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const benchUsage = `Usage: spillctl bench [--callers N | --rate R/s] [--duration D | --count N] [flags]

Load-tests an admitter's submit door (HTTP or NATS) and reports throughput,
latency percentiles and verdicts (admitted, queued, rejected and errors by
reason). A progress line goes to stderr every second.

Two ways to load:
  --callers N   closed loop: N callers, each submitting its next job when
                its answer arrives (latency = service time; default 10)
  --rate R/s    open loop: jobs on a fixed schedule whatever the answers;
                latency is measured from each job's scheduled time, so a
                slow server cannot hide its queueing (no coordinated
                omission). At most --max-outstanding jobs await answers;
                jobs held back by that bound are reported as late, and
                those never sent before the end as unsent.

The run lasts --duration (default 10s) or --count jobs, after --warmup,
whose jobs are sent but not measured. --keys K spreads jobs over K client
keys (bench-0 … bench-K-1) in --key-header, round-robin.

Examples:
  spillctl bench --queue demo --callers 50 --duration 30s
  spillctl bench --queue email --rate 2000/s --duration 1m --keys 100 --warmup 5s
  spillctl bench --via nats --rate 500/s --count 10000 --json
  spillctl bench --queue demo --callers 64 --batch 100 --keys 1000

--server takes several admitters' URLs, comma-separated: HTTP jobs go to
each in turn (over NATS the admitters' queue group spreads them).

--batch N sends batches of N jobs (POST …/jobs:batch, spillway.submitbatch.<queue>);
--count, --rate and latencies then count batches, verdicts and throughput jobs.

Flags:
`

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("spillctl bench", flag.ContinueOnError)
	q := fs.String("queue", "demo", "the `QUEUE` to submit to")
	via := fs.String("via", "http", "front `DOOR`: http | nats")
	httpTransport := fs.String("http-transport", "std", "the HTTP client's `TRANSPORT`: std (net/http's) | lean (plain HTTP/1.1 on the caller's goroutine: its CPU per job is nearer the NATS client's, so on a machine shared with the admitter more of what is measured is the admitter)")
	server := serverFlag(fs, getenv)
	natsURL := natsFlag(fs, getenv)
	apiKey := apiKeyFlag(fs)
	callers := fs.Int("callers", 0, "closed loop with `N` callers (default 10 when --rate is not given)")
	rateFlag := fs.String("rate", "", "open loop at this `RATE`: 500/s, 30000/m, 1/10ms (a bare number is per second)")
	maxOut := fs.Int("max-outstanding", loadgen.DefaultMaxOutstanding, "open loop: at most `N` jobs awaiting answers")
	spin := fs.Duration("spin-wait", time.Millisecond, "open loop: busy-wait the last `D` before each send, for sends on time to the microsecond (0: sleep only, saving a CPU; timers wake ~1ms late)")
	duration := fs.Duration("duration", 0, "send for `D` after the warm-up (default 10s when --count is not given)")
	count := fs.Int64("count", 0, "send `N` jobs after the warm-up, then stop")
	warmup := fs.Duration("warmup", 0, "send, but do not measure, for `D` first")
	keys := fs.Int("keys", 1, "`K` distinct client keys, round-robin (0: send no key header)")
	keyHeader := fs.String("key-header", "X-Api-Key", "the `NAME` of the header that carries the client key")
	payloadBytes := fs.Int("payload-bytes", 128, "`N` bytes of random payload per job")
	cost := fs.Int64("cost", 0, "`N` units per job, sent as Spillway-Cost (default: the admitter's, 1)")
	batchSize := fs.Int("batch", 0, "send batches of `N` jobs (1 to 1000) to the batch door; latencies are per batch, verdicts per job (0: single submissions)")
	var headers headerFlags
	fs.Var(&headers, "header", "send a header, `NAME=VALUE`, with every job (repeatable)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D` (counted as an error)")
	quiet := fs.Bool("quiet", false, "no progress line")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if done, err := parseNoArgs(fs, args, benchUsage, stdout); done || err != nil {
		return err
	}
	if err := spillway.ValidateQueueName(*q); err != nil {
		return usageErrorf("spillctl bench: --queue: %w", err)
	}
	cfg := loadgen.Config{Callers: *callers, MaxOutstanding: *maxOut, Duration: *duration, Count: *count, Warmup: *warmup}
	if *rateFlag != "" {
		cfg.SpinWait = *spin
	}
	switch {
	case *rateFlag != "" && *callers > 0:
		return usageErrorf("spillctl bench: --callers (closed loop) and --rate (open loop) both given: choose one")
	case *rateFlag != "":
		s := *rateFlag
		if !strings.Contains(s, "/") {
			s += "/s"
		}
		var err error
		if cfg.Rate, err = bucket.ParseRate(s); err != nil {
			return usageErrorf("spillctl bench: --rate %q: want COUNT/UNIT such as 500/s, 30000/m or 1/10ms", *rateFlag)
		}
	case *callers == 0:
		cfg.Callers = 10
	}
	if cfg.Duration == 0 && cfg.Count == 0 {
		cfg.Duration = 10 * time.Second
	}
	switch {
	case *keys < 0:
		return usageErrorf("spillctl bench: --keys %d: want 0 or more", *keys)
	case *payloadBytes < 0:
		return usageErrorf("spillctl bench: --payload-bytes %d: want 0 or more", *payloadBytes)
	case *cost < 0:
		return usageErrorf("spillctl bench: --cost %d: want 1 or more", *cost)
	case *batchSize < 0 || *batchSize > spillway.MaxBatchJobs:
		return usageErrorf("spillctl bench: --batch %d: want 1 to %d (0: single submissions)", *batchSize, spillway.MaxBatchJobs)
	case *maxOut < 1:
		return usageErrorf("spillctl bench: --max-outstanding %d: want 1 or more", *maxOut)
	case *spin < 0:
		return usageErrorf("spillctl bench: --spin-wait %v: want 0 or more", *spin)
	case *timeout <= 0:
		return usageErrorf("spillctl bench: --timeout %v: want a positive duration", *timeout)
	case *httpTransport != "std" && *httpTransport != "lean":
		return usageErrorf("spillctl bench: --http-transport %q: want std or lean", *httpTransport)
	}
	for i := range *keys {
		cfg.Keys = append(cfg.Keys, "bench-"+strconv.Itoa(i))
	}
	payload := make([]byte, *payloadBytes)
	_, _ = rand.Read(payload)
	// Every job carries the same headers; the payload goes in each one.
	// Each job is one exchange, counted as it went (no retries), and
	// carries no generated idempotency key: the admitter's plain path.
	opts := submitOptions(headers, *cost)
	clientOpts := []client.Option{client.WithTimeout(*timeout), client.WithRetries(0, 0), client.WithoutIdempotencyKeys()}

	var batch *loadgen.Batch
	if *batchSize > 0 {
		batch = &loadgen.Batch{Size: *batchSize, KeyHeader: *keyHeader, Payload: payload, Options: opts}
		batch.Keys, cfg.Keys = cfg.Keys, nil // the batch spreads its jobs over them
	}
	var where string
	var c *client.Client
	var others []*client.Client // more admitters' HTTP doors, in turn with c's
	switch *via {
	case "http":
		// The admitter's client, with a connection for each caller.
		servers := strings.Split(*server, ",")
		if len(servers) > 1 && batch != nil {
			return usageErrorf("spillctl bench: --batch takes one --server, not %d", len(servers))
		}
		idle := max(cfg.Callers, min(*maxOut, 1024))
		var hc *http.Client
		if *httpTransport == "lean" {
			for _, s := range servers {
				if u, ok := httpURL(strings.TrimSpace(s)); ok && u.Scheme != "http" {
					return usageErrorf("spillctl bench: --http-transport lean speaks plain http:// only, not --server %q (use --http-transport std)", s)
				}
			}
			// No Client.Timeout: with a transport net/http does not
			// know, it costs a goroutine and a timer per request. The
			// client's WithTimeout bounds each exchange by its context,
			// whose deadline the transport puts on the connection.
			hc = &http.Client{Transport: &leanhttp.Transport{MaxIdlePerHost: idle}}
		} else {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = idle
			tr.MaxIdleConns = idle * len(servers)
			hc = &http.Client{Timeout: *timeout, Transport: tr}
		}
		defer hc.CloseIdleConnections()
		for i, s := range servers {
			a, err := newAdmitter("spillctl bench", strings.TrimSpace(s), keyOr(*apiKey, getenv), *timeout, append(clientOpts, client.WithHTTPClient(hc))...)
			if err != nil {
				return err
			}
			if i > 0 {
				others = append(others, a.c)
				continue
			}
			c = a.c
			where = a.base + "/v1/queues/" + *q + "/jobs"
			if batch != nil {
				where += ":batch"
			}
		}
		if len(others) > 0 {
			where += fmt.Sprintf(" and %d more admitter%s in turn", len(others), plural(len(others)))
		}
	case "nats":
		var closeConn func()
		var err error
		if c, closeConn, err = natsClient(*natsURL, "spillctl bench", getenv, append(keyOption(keyOr(*apiKey, getenv)), clientOpts...)...); err != nil {
			return fmt.Errorf("spillctl bench: %w", err)
		}
		defer closeConn()
		where = natsShown(*natsURL) + " " + spillway.SubmitPrefix + *q
		if batch != nil {
			where = natsShown(*natsURL) + " " + spillway.SubmitBatchPrefix + *q
		}
	default:
		return usageErrorf("spillctl bench: --via %q: want http or nats", *via)
	}
	cfg.Target = &loadgen.SubmitTarget{Client: c, Queue: *q, Options: opts, KeyHeader: *keyHeader, Payload: payload}
	if len(others) > 0 {
		rr := loadgen.RoundRobin{cfg.Target}
		for _, o := range others {
			rr = append(rr, &loadgen.SubmitTarget{Client: o, Queue: *q, Options: opts, KeyHeader: *keyHeader, Payload: payload})
		}
		cfg.Target = rr
	}
	if batch != nil {
		cfg.Target = &loadgen.BatchTarget{Client: c, Queue: *q, Batch: batch}
	}
	if !*quiet {
		cfg.Progress = func(p loadgen.Progress) { fmt.Fprintln(stderr, formatProgress(p)) }
	}
	if !*asJSON {
		line := describeBench(where, cfg, *keyHeader, *payloadBytes)
		if batch != nil {
			line += fmt.Sprintf(", batches of %d jobs over %d key%s (latencies per batch, verdicts and throughput per job)", batch.Size, len(batch.Keys), plural(len(batch.Keys)))
		}
		fmt.Fprintln(stdout, line)
	}

	cpu0, cpuOK := ownCPU()
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return usageErrorf("spillctl bench: %w", err)
	}
	sum := summarize(rep, *via, where, cfg)
	if *via == "http" {
		sum.HTTPTransport = *httpTransport
	}
	if cpu1, ok := ownCPU(); ok && cpuOK {
		// Every answered job, the warm-up's included: a batch's warm-up
		// answer counts its jobs.
		jobs := rep.Counts.Total() + rep.Warmup*int64(max(1, *batchSize))
		if jobs > 0 {
			sum.CPUPerJobUS = float64(cpu1-cpu0) / 1e3 / float64(jobs)
		}
	}
	if *asJSON {
		if err := writeJSON(stdout, sum); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, formatBench(sum))
	}
	if c := rep.Counts; c.Total() > 0 && c.Errors == c.Total() {
		for reason := range c.ErrorsBy {
			switch reason {
			case "connection refused", "no responders", "timeout", "transport":
				return fmt.Errorf("spillctl bench: every job failed (%s): is the admitter running at %s?", joinCounts(c.ErrorsBy), where)
			}
		}
		return fmt.Errorf("spillctl bench: every job failed (%s)", joinCounts(c.ErrorsBy))
	}
	return nil
}

// describeBench is the line printed before the run.
func describeBench(where string, cfg loadgen.Config, keyHeader string, payloadBytes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench %s: ", where)
	if cfg.Callers > 0 {
		fmt.Fprintf(&b, "closed loop, %d callers", cfg.Callers)
	} else {
		fmt.Fprintf(&b, "open loop at %s (at most %d outstanding)", cfg.Rate, cfg.MaxOutstanding)
	}
	switch {
	case cfg.Duration > 0 && cfg.Count > 0:
		fmt.Fprintf(&b, ", %d jobs or %s", cfg.Count, cfg.Duration)
	case cfg.Duration > 0:
		fmt.Fprintf(&b, ", for %s", cfg.Duration)
	default:
		fmt.Fprintf(&b, ", %d jobs", cfg.Count)
	}
	if cfg.Warmup > 0 {
		fmt.Fprintf(&b, " after a %s warm-up", cfg.Warmup)
	}
	if n := len(cfg.Keys); n > 0 {
		fmt.Fprintf(&b, ", %d key%s in %s", n, plural(n), keyHeader)
	}
	fmt.Fprintf(&b, ", %d-byte payloads", payloadBytes)
	return b.String()
}

// formatProgress is the progress line printed every second.
func formatProgress(p loadgen.Progress) string {
	phase := ""
	if p.Warmup {
		phase = " warm-up"
	}
	c := p.Counts
	s := fmt.Sprintf("%6s%s  sent %d  answered %d  outstanding %d  %.0f/s  p99 %s  admitted %d  queued %d  rejected %d  errors %d",
		fmtDur(p.Elapsed.Round(time.Second)), phase, p.Sent, p.Answered, p.Outstanding, p.Rate, fmtLatency(int64(p.P99)),
		c.Admitted, c.Queued, c.Rejected, c.Errors)
	if p.Late > 0 {
		s += fmt.Sprintf("  late %d", p.Late)
	}
	return s
}

// benchSummary is bench's result, as printed by --json.
type benchSummary struct {
	Via      string  `json:"via"`
	Target   string  `json:"target"`
	Mode     string  `json:"mode"` // closed | open
	Callers  int     `json:"callers,omitempty"`
	Rate     string  `json:"rate,omitempty"`
	Elapsed  float64 `json:"elapsed_seconds"`
	Sent     int64   `json:"sent"`
	Answered int64   `json:"answered"`
	// Throughput is answers per second.
	Throughput float64 `json:"throughput_per_second"`
	LatencyMS  struct {
		Min  float64 `json:"min"`
		Mean float64 `json:"mean"`
		P50  float64 `json:"p50"`
		P90  float64 `json:"p90"`
		P99  float64 `json:"p99"`
		P999 float64 `json:"p999"`
		Max  float64 `json:"max"`
	} `json:"latency_ms"`
	Verdicts struct {
		Admitted   int64            `json:"admitted"`
		Queued     int64            `json:"queued"`
		Rejected   int64            `json:"rejected"`
		Errors     int64            `json:"errors"`
		RejectedBy map[string]int64 `json:"rejected_by,omitempty"`
		ErrorsBy   map[string]int64 `json:"errors_by,omitempty"`
	} `json:"verdicts"`
	Late           int64   `json:"late"`
	Unsent         int64   `json:"unsent"`
	MaxSendLagMS   float64 `json:"max_send_lag_ms"`
	MaxOutstanding int64   `json:"max_outstanding"`
	WarmupAnswers  int64   `json:"warmup_answers"`
	Interrupted    bool    `json:"interrupted,omitempty"`
	Canceled       int64   `json:"canceled,omitempty"`
	// CPUPerJobUS is spillctl's own CPU time (user + system, from
	// getrusage) from the start of the warm-up to the end of the run, in
	// microseconds per answered job, the warm-up's answers included: what
	// the load generator costs beside the servers it loads. Absent where
	// the system does not say.
	CPUPerJobUS float64 `json:"cpu_us_per_job,omitempty"`
	// HTTPTransport is the HTTP client's transport, std or lean (HTTP
	// only): --http-transport.
	HTTPTransport string `json:"http_transport,omitempty"`
}

func summarize(rep *loadgen.Report, via, where string, cfg loadgen.Config) benchSummary {
	s := benchSummary{Via: via, Target: where, Mode: "closed", Callers: cfg.Callers}
	if cfg.Callers == 0 {
		s.Mode, s.Rate = "open", cfg.Rate.String()
	}
	s.Elapsed = rep.Elapsed.Seconds()
	s.Sent, s.Answered, s.Throughput = rep.Sent, rep.Counts.Total(), rep.Throughput
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	h := rep.Latency
	s.LatencyMS.Min, s.LatencyMS.Mean, s.LatencyMS.Max = ms(h.Min()), h.Mean()/1e6, ms(h.Max())
	s.LatencyMS.P50, s.LatencyMS.P90 = ms(h.Quantile(0.5)), ms(h.Quantile(0.9))
	s.LatencyMS.P99, s.LatencyMS.P999 = ms(h.Quantile(0.99)), ms(h.Quantile(0.999))
	c := rep.Counts
	s.Verdicts.Admitted, s.Verdicts.Queued, s.Verdicts.Rejected, s.Verdicts.Errors = c.Admitted, c.Queued, c.Rejected, c.Errors
	s.Verdicts.RejectedBy, s.Verdicts.ErrorsBy = c.RejectedBy, c.ErrorsBy
	s.Late, s.Unsent, s.MaxSendLagMS = rep.Late, rep.Unsent, float64(rep.MaxSendLag)/1e6
	s.MaxOutstanding, s.WarmupAnswers = rep.MaxOutstanding, rep.Warmup
	s.Interrupted, s.Canceled = rep.Interrupted, rep.Canceled
	return s
}

// formatBench prints the summary for people.
func formatBench(s benchSummary) string {
	var b strings.Builder
	ns := func(ms float64) string { return fmtLatency(int64(ms * 1e6)) }
	if s.Interrupted {
		fmt.Fprintf(&b, "interrupted: the figures cover what was answered (%d jobs abandoned)\n", s.Canceled)
	}
	fmt.Fprintf(&b, "sent        %d in %s", s.Sent, fmtDur(time.Duration(s.Elapsed*float64(time.Second))))
	if s.Mode == "open" {
		fmt.Fprintf(&b, "  (late %d, unsent %d, max send lag %s)", s.Late, s.Unsent, ns(s.MaxSendLagMS))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "throughput  %.1f answers/s\n", s.Throughput)
	l := s.LatencyMS
	fmt.Fprintf(&b, "latency     p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (mean %s, min %s)\n",
		ns(l.P50), ns(l.P90), ns(l.P99), ns(l.P999), ns(l.Max), ns(l.Mean), ns(l.Min))
	if s.Mode == "open" {
		b.WriteString("            (from each job's scheduled send time)\n")
	}
	v := s.Verdicts
	fmt.Fprintf(&b, "verdicts    admitted %d  queued %d  rejected %d  errors %d\n", v.Admitted, v.Queued, v.Rejected, v.Errors)
	if len(v.RejectedBy) > 0 {
		fmt.Fprintf(&b, "  rejected  %s\n", joinCounts(v.RejectedBy))
	}
	if len(v.ErrorsBy) > 0 {
		fmt.Fprintf(&b, "  errors    %s\n", joinCounts(v.ErrorsBy))
	}
	if s.WarmupAnswers > 0 {
		fmt.Fprintf(&b, "warm-up     %d answers not counted\n", s.WarmupAnswers)
	}
	if s.CPUPerJobUS > 0 {
		fmt.Fprintf(&b, "own CPU     %s µs per job (spillctl's user + system, warm-up included)\n", sig3(s.CPUPerJobUS))
	}
	return b.String()
}

// joinCounts prints counts by reason, largest first: "queue-full 40,
// rate-limited 2".
func joinCounts(m map[string]int64) string {
	reasons := slices.Collect(maps.Keys(m))
	slices.SortFunc(reasons, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %d", r, m[r])
	}
	return strings.Join(parts, ", ")
}

// fmtLatency prints nanoseconds with three significant digits: 850µs,
// 1.21ms, 12.3ms, 123ms, 1.23s.
func fmtLatency(ns int64) string {
	d := float64(ns)
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%dns", ns)
	case ns < 1e6:
		return sig3(d/1e3) + "µs"
	case ns < 1e9:
		return sig3(d/1e6) + "ms"
	}
	return sig3(d/1e9) + "s"
}

func sig3(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}
