package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

const topUsage = `Usage: spillctl top [--server URL] [--interval 1s] [--queue Q] [--keys 5] [--once] [--json]

A live view of the queues, redrawn every interval until Ctrl-C: the queue
table of "spillctl queues" with per-second rates — how fast each backlog
grows or shrinks, and, from the admitter's /metrics, jobs completed and
jobs admitted, queued and rejected. The decision rates are those of the
admitter --server points at (one of several replicas sees its share);
completions are counted where workers run.

Under the table, the keys with the deepest backlog of each queue whose
backlog has jobs (--keys of them, 0 for none), from the admitter's
GET /v1/queues/{queue}/keys: the key's hash (the key itself when the
admitter has http.show_raw_keys), its backlog depth, its oldest job's age,
its weight, how many of its jobs are high, normal and low priority, and
its share of the jobs the drain released in the last minute (blank until
a drain has published one). The keys listing lists every tenant's keys:
it takes an admin key (--api-key, one of http.admin_keys_file's); with a
submit key the table is shown, and each queue's keys say forbidden.
--queue shows one queue only.

--once samples twice, one interval apart, prints that one frame without
clearing the screen, and exits. --json prints each frame as one line of
JSON instead of the table.

Examples:
  spillctl top
  spillctl top --interval 5s --server http://admitter-1:8080
  spillctl top --queue email --keys 20
  spillctl top --once --json | jq '.queues[] | {name, depth_per_second}'

Flags:
`

// Screen control: cursor home, clear the screen.
const clearScreen = "\x1b[H\x1b[2J"

func runTop(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("spillctl top", flag.ContinueOnError)
	server := serverFlag(fs, getenv)
	apiKey := apiKeyFlag(fs)
	interval := fs.Duration("interval", time.Second, "`D` between frames")
	once := fs.Bool("once", false, "print one frame (rates over one interval) and exit")
	asJSON := fs.Bool("json", false, "print frames as JSON lines")
	keys := addTopKeysFlags(fs)
	if done, err := parseNoArgs(fs, args, topUsage, stdout); done || err != nil {
		return err
	}
	if err := keys.check(fs); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return usageErrorf("spillctl top: --interval %v: want at least 10ms", *interval)
	}
	a, err := newAdmitter("spillctl top", *server, keyOr(*apiKey, getenv), max(*interval, 2*time.Second))
	if err != nil {
		return err
	}
	prev := keys.sample(ctx, a, sampleTop(ctx, a))
	if *once && prev.err != nil {
		return fmt.Errorf("spillctl top: %w", prev.err)
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	if !*once {
		if err := drawTop(stdout, a.base, *interval, nil, prev, *asJSON, true); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			if !*once && !*asJSON {
				fmt.Fprintln(stdout)
			}
			return nil
		case <-t.C:
		}
		cur := keys.sample(ctx, a, sampleTop(ctx, a))
		if ctx.Err() != nil {
			continue // interrupted while sampling
		}
		if err := drawTop(stdout, a.base, *interval, &prev, cur, *asJSON, !*once); err != nil {
			return err
		}
		if *once {
			if cur.err != nil {
				return fmt.Errorf("spillctl top: %w", cur.err)
			}
			return nil
		}
		prev = cur
	}
}

// topSample is what the admitter said at one moment.
type topSample struct {
	at       time.Time
	queues   []spillway.QueueInfo
	err      error                  // the queues could not be read
	counters map[counterKey]float64 // nil when /metrics could not be read
	mErr     error
	keys     []topKeys // each queue's keys (topkeys.go)
}

// counterKey names one summed counter: a metric, a queue and (for
// decisions) a verdict.
type counterKey struct{ metric, queue, verdict string }

// The counters top turns into rates (docs/design.md#metrics).
const (
	metricDecisions = "spillway_decisions_total"
	metricCompleted = "spillway_jobs_completed_total"
)

func sampleTop(ctx context.Context, a *admitter) topSample {
	qs, err := a.c.Queues(ctx)
	if err != nil {
		err = a.explain(err)
	}
	s := topSample{at: time.Now(), queues: qs, err: err}
	if m, err := a.c.Metrics(ctx); err != nil {
		s.mErr = fmt.Errorf("GET /metrics: %w", a.explain(err))
	} else {
		s.counters = parseCounters(bytes.NewReader(m))
	}
	return s
}

// parseCounters sums the samples of the decision and completion counters
// in Prometheus' text format by queue (and verdict).
func parseCounters(r io.Reader) map[counterKey]float64 {
	out := map[counterKey]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := line[:end]
		if name != metricDecisions && name != metricCompleted {
			continue
		}
		labels, rest, ok := parseLabels(line[end:])
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		k := counterKey{metric: name, queue: labels["queue"]}
		if name == metricDecisions {
			k.verdict = labels["verdict"]
		}
		out[k] += v
	}
	return out
}

// parseLabels reads `{a="x",b="y"}` at the start of s (if any) and returns
// the labels and what follows.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	if s == "" || s[0] != '{' {
		return labels, s, true
	}
	i := 1
	for {
		for i < len(s) && (s[i] == ',' || s[i] == ' ') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return labels, s[i+1:], true
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return nil, "", false
		}
		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 2
		var v strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(s[i])
				}
				continue
			}
			v.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, "", false
		}
		labels[name] = v.String()
		i++
	}
}

// topRow is one queue of a frame: its info and rates per second (nil when
// unknown).
type topRow struct {
	spillway.QueueInfo
	DepthPerSecond     *float64 `json:"depth_per_second"`
	CompletedPerSecond *float64 `json:"completed_per_second"`
	AdmittedPerSecond  *float64 `json:"admitted_per_second"`
	QueuedPerSecond    *float64 `json:"queued_per_second"`
	RejectedPerSecond  *float64 `json:"rejected_per_second"`
}

// topFrame is one frame of spillctl top.
type topFrame struct {
	At           time.Time `json:"at"`
	Server       string    `json:"server"`
	Queues       []topRow  `json:"queues"`
	Error        string    `json:"error,omitempty"`
	MetricsError string    `json:"metrics_error,omitempty"`
	Keys         []topKeys `json:"keys,omitempty"`
}

// buildFrame computes cur's rates against prev (nil: no rates yet).
func buildFrame(server string, prev *topSample, cur topSample) topFrame {
	f := topFrame{At: cur.at, Server: server, Keys: cur.keys}
	if cur.err != nil {
		f.Error = cur.err.Error()
	}
	if cur.mErr != nil {
		f.MetricsError = cur.mErr.Error()
	}
	var dt float64
	old := map[string]spillway.QueueInfo{}
	if prev != nil && prev.err == nil {
		dt = cur.at.Sub(prev.at).Seconds()
		for _, q := range prev.queues {
			old[q.Name] = q
		}
	}
	rate := func(metric, queue, verdict string) *float64 {
		if dt <= 0 || prev.counters == nil || cur.counters == nil {
			return nil
		}
		k := counterKey{metric, queue, verdict}
		c, ok := cur.counters[k]
		if !ok {
			return nil
		}
		d := c - prev.counters[k]
		if d < 0 { // the admitter restarted: its counter began again at 0
			d = c
		}
		r := d / dt
		return &r
	}
	for _, q := range cur.queues {
		row := topRow{QueueInfo: q}
		if p, ok := old[q.Name]; ok && dt > 0 {
			r := float64(q.Depth-p.Depth) / dt
			row.DepthPerSecond = &r
		}
		row.CompletedPerSecond = rate(metricCompleted, q.Name, "")
		row.AdmittedPerSecond = rate(metricDecisions, q.Name, string(spillway.Admitted))
		row.QueuedPerSecond = rate(metricDecisions, q.Name, string(spillway.Queued))
		row.RejectedPerSecond = rate(metricDecisions, q.Name, string(spillway.Rejected))
		f.Queues = append(f.Queues, row)
	}
	sort.Slice(f.Queues, func(i, j int) bool { return f.Queues[i].Name < f.Queues[j].Name })
	return f
}

// drawTop prints one frame, clearing the screen first when clear is set.
func drawTop(w io.Writer, server string, interval time.Duration, prev *topSample, cur topSample, asJSON, clear bool) error {
	f := buildFrame(server, prev, cur)
	if asJSON {
		b, err := jsonLine(f)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	s := formatTop(f, interval, time.Now().Location())
	if clear {
		s = clearScreen + s
	}
	_, err := io.WriteString(w, s)
	return err
}

// formatTop prints a frame as the header line and the queue table.
func formatTop(f topFrame, interval time.Duration, loc *time.Location) string {
	var b strings.Builder
	fmt.Fprintf(&b, "spillway top — %s — %s — every %s (Ctrl-C to quit)\n\n", f.Server, f.At.In(loc).Format("15:04:05"), fmtDur(interval))
	if f.Error != "" {
		fmt.Fprintf(&b, "%s\n(trying again every %s)\n", f.Error, fmtDur(interval))
		return b.String()
	}
	if len(f.Queues) == 0 {
		b.WriteString("no queues (the admitter's config names none)\n")
		return b.String()
	}
	rows := [][]string{{"QUEUE", "DEPTH/CAP", "FILL", "DEPTH/s", "LEAK", "LEAK NOW", "READY", "IN FLIGHT", "DONE/s", "ADMIT/s", "QUEUE/s", "REJECT/s", "OLDEST", "DRAIN", "DEAD"}}
	infos := make([]spillway.QueueInfo, 0, len(f.Queues))
	for _, q := range f.Queues {
		infos = append(infos, q.QueueInfo)
		rows = append(rows, []string{
			q.Name, fmt.Sprintf("%d/%d", q.Depth, q.Capacity), fmtFill(q.Fill), fmtRate(q.DepthPerSecond, true),
			orDash(q.LeakRate), fmtLeakNow(q.QueueInfo), fmt.Sprint(q.Ready), fmt.Sprint(q.InFlight),
			fmtRate(q.CompletedPerSecond, false), fmtRate(q.AdmittedPerSecond, false),
			fmtRate(q.QueuedPerSecond, false), fmtRate(q.RejectedPerSecond, false),
			msOrDash(q.OldestAgeMS, q.Depth), msOrDash(q.EstimatedDrainMS, q.Depth), fmt.Sprint(q.Dead),
		})
	}
	b.WriteString(table(rows))
	for _, w := range queueWarnings(infos) {
		b.WriteString(w + "\n")
	}
	if f.MetricsError != "" {
		fmt.Fprintf(&b, "(no completion or decision rates: %s)\n", f.MetricsError)
	}
	b.WriteString(formatKeysRunning(f.Keys, loc))
	return b.String()
}

// fmtLeakNow prints the leak's rate now: "paused" while a pushback pauses
// it, "-" from an admitter that does not say.
func fmtLeakNow(q spillway.QueueInfo) string {
	switch {
	case q.LeakPausedMS > 0:
		return "paused"
	case q.LeakRateCurrent <= 0:
		return "-"
	}
	return fmt.Sprintf("%.1f/s", q.LeakRateCurrent)
}

// fmtRate prints a rate per second with one decimal, "-" when unknown;
// signed shows + for growth.
func fmtRate(r *float64, signed bool) string {
	if r == nil {
		return "-"
	}
	if signed && *r > 0 {
		return "+" + strconv.FormatFloat(*r, 'f', 1, 64)
	}
	if signed {
		return strconv.FormatFloat(*r, 'f', 1, 64)
	}
	return strconv.FormatFloat(max(*r, 0), 'f', 1, 64)
}
