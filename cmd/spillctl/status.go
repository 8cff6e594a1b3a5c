package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const statusUsage = `Usage: spillctl status ID [--server URL] [--json]

Shows a job's state (admitted, queued, running, succeeded, retrying, dead,
expired, cancelled), attempts, last error and times, from the admitter's
GET /v1/jobs/{id}.

Examples:
  spillctl status 0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77
  spillctl status 0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77 --json | jq .state

Flags:
`

// jobStatus is a job's status as spillctl prints it, and --json its JSON:
// GET /v1/jobs/{id}'s fields (docs/design.md#reads).
type jobStatus struct {
	ID         string     `json:"id"`
	Queue      string     `json:"queue"`
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	LastError  string     `json:"last_error,omitempty"`
	EnqueuedAt *time.Time `json:"enqueued_at,omitempty"`
	NotBefore  *time.Time `json:"not_before,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	UpdatedAt  *time.Time `json:"updated_at,omitempty"`
}

func runStatus(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return runJob(ctx, "spillctl status", statusUsage, (*client.Client).Status, args, getenv, stdout)
}

// getter is a command that gets one of the admitter's JSON documents and
// prints it for people, or with --json as the admitter sent it.
type getter struct {
	a      *admitter
	arg    string // what the document is of (a job ID, a queue); "" when not given
	asJSON bool
}

// parseGetter parses a getter's flags and its one positional argument,
// what, which may be optional. done is true when --help was printed.
func parseGetter(name, usage, what string, required bool, args []string, getenv func(string) string, stdout io.Writer) (g getter, done bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	conn := addAPIFlags(fs, getenv)
	asJSON := fs.Bool("json", false, "print the admitter's answer as JSON")
	pos, done, err := parseArgs(fs, args, usage, stdout)
	if done || err != nil {
		return getter{}, done, err
	}
	if len(pos) > 1 || required && len(pos) == 0 {
		want := "one " + what
		if !required {
			want = "at most " + want
		}
		return getter{}, false, usageErrorf("%s: want %s, got %d arguments (see %s --help)", name, want, len(pos), name)
	}
	if len(pos) == 1 {
		g.arg = pos[0]
	}
	g.asJSON = *asJSON
	g.a, err = conn.admitter(name, getenv)
	return g, false, err
}

// print writes the document: v as JSON, indented, with --json; text
// otherwise.
func (g getter) print(w io.Writer, v any, text string) error {
	if g.asJSON {
		return writeJSON(w, v)
	}
	_, err := io.WriteString(w, text)
	return err
}

// printJob writes a job's status: as JSON with --json, for people
// otherwise.
func (g getter) printJob(w io.Writer, st jobStatus) error {
	if g.asJSON {
		return writeJSON(w, st)
	}
	_, err := io.WriteString(w, formatJob(st, time.Now()))
	return err
}

// keyOr is the --api-key value, or $SPILLWAY_API_KEY.
func keyOr(flagValue string, getenv func(string) string) string {
	if flagValue != "" {
		return flagValue
	}
	return getenv("SPILLWAY_API_KEY")
}

// formatJob prints a job's status, one field a line; times in now's zone,
// with how long ago (or how soon) they are.
func formatJob(st jobStatus, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s\n", st.ID)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  queue\t%s\n", st.Queue)
	fmt.Fprintf(tw, "  state\t%s\n", st.State)
	fmt.Fprintf(tw, "  attempts\t%d\n", st.Attempts)
	if st.LastError != "" {
		fmt.Fprintf(tw, "  last error\t%s\n", st.LastError)
	}
	for _, f := range []struct {
		name string
		t    *time.Time
	}{
		{"enqueued", st.EnqueuedAt}, {"not before", st.NotBefore}, {"started", st.StartedAt},
		{"finished", st.FinishedAt}, {"updated", st.UpdatedAt},
	} {
		if f.t == nil || f.t.IsZero() {
			continue
		}
		rel := "now"
		if d := now.Sub(*f.t); d > 0 {
			rel = fmtDur(d) + " ago"
		} else if d < 0 {
			rel = "in " + fmtDur(-d)
		}
		fmt.Fprintf(tw, "  %s\t%s  (%s)\n", f.name, fmtClock(*f.t, now), rel)
	}
	tw.Flush()
	return b.String()
}

const queuesUsage = `Usage: spillctl queues [QUEUE] [--server URL] [--json]

Lists the admitter's queues (GET /v1/queues), or one queue
(GET /v1/queues/{queue}): backlog depth and capacity, fill, leak rate,
admitted jobs ready or in flight, the oldest backlog job's age, the time to
drain the backlog at the leak rate, and dead letters. A paused queue
(spillctl pause) shows PAUSED as its leak, and a line under the table says
since when, by whom and why.

Examples:
  spillctl queues
  spillctl queues email --json

Flags:
`

func runQueues(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	g, done, err := parseGetter("spillctl queues", queuesUsage, "queue name", false, args, getenv, stdout)
	if done || err != nil {
		return err
	}
	var list spillway.QueueList
	var doc any = &list
	if g.arg != "" {
		var qi *spillway.QueueInfo
		qi, err = g.a.c.Queue(ctx, g.arg)
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("spillctl queues: the admitter at %s has no queue %q (spillctl queues lists them)", g.a.base, g.arg)
		}
		if err == nil {
			list.Queues, doc = []spillway.QueueInfo{*qi}, qi
		}
	} else {
		list.Queues, err = g.a.c.Queues(ctx)
	}
	if err != nil {
		return fmt.Errorf("spillctl queues: %w", g.a.explain(err))
	}
	return g.print(stdout, doc, formatQueues(list.Queues))
}

// formatQueues prints the queue table, and a warning under it for each
// backlog that has jobs and no worker draining it.
func formatQueues(qs []spillway.QueueInfo) string {
	if len(qs) == 0 {
		return "no queues (the admitter's config names none)\n"
	}
	rows := [][]string{{"QUEUE", "DEPTH/CAP", "FILL", "LEAK", "READY", "IN FLIGHT", "OLDEST", "DRAIN", "DEAD"}}
	for _, q := range qs {
		leak := orDash(q.LeakRate)
		if q.Paused {
			leak = "PAUSED"
		}
		rows = append(rows, []string{
			q.Name, fmt.Sprintf("%d/%d", q.Depth, q.Capacity), fmtFill(q.Fill), leak,
			fmt.Sprint(q.Ready), fmt.Sprint(q.InFlight),
			msOrDash(q.OldestAgeMS, q.Depth), msOrDash(q.EstimatedDrainMS, q.Depth), fmt.Sprint(q.Dead),
		})
	}
	var b strings.Builder
	b.WriteString(table(rows))
	for _, w := range queueWarnings(qs) {
		b.WriteString(w + "\n")
	}
	return b.String()
}

// queueWarnings are what a person should act on.
func queueWarnings(qs []spillway.QueueInfo) []string {
	var ws []string
	for _, q := range qs {
		if q.Paused {
			w := fmt.Sprintf("! %s: paused", q.Name)
			if q.PausedAt != nil {
				w += fmt.Sprintf(" since %s (%s ago)", q.PausedAt.Local().Format(time.DateTime), fmtDur(time.Since(*q.PausedAt).Round(time.Second)))
			}
			if q.PausedBy != "" {
				w += " by " + q.PausedBy
			}
			if q.PauseReason != "" {
				w += ": " + q.PauseReason
			}
			ws = append(ws, w+"; its workers start none of its jobs (spillctl resume "+q.Name+")")
			continue
		}
		if q.Depth > 0 && q.BacklogPullers == 0 {
			ws = append(ws, fmt.Sprintf("! %s: %d jobs wait in the backlog and no worker has a free handler for them (start a worker for this queue, or more: every handler may be busy with admitted jobs)", q.Name, q.Depth))
		}
		if q.Dead > 0 {
			ws = append(ws, fmt.Sprintf("! %s: %d dead letters (spillctl dlq list --queue %s)", q.Name, q.Dead, q.Name))
		}
	}
	return ws
}

func fmtFill(f float64) string {
	if f > 0 && f < 0.001 {
		return "<0.1%"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// msOrDash prints a time in milliseconds, or "-" for an empty backlog.
func msOrDash(ms, depth int64) string {
	if depth == 0 {
		return "-"
	}
	return fmtDur(time.Duration(ms) * time.Millisecond)
}

// table lays rows out in columns: the first aligned left (a name), the
// others right (numbers).
func table(rows [][]string) string {
	align := "l"
	if len(rows) > 0 {
		align += strings.Repeat("r", len(rows[0])-1)
	}
	return layout(rows, align)
}

// layout lays rows out in columns two spaces apart, column i aligned left
// or right as align[i] is 'l' or 'r'. The last column is not padded.
func layout(rows [][]string, align string) string {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			switch {
			case i < len(align) && align[i] == 'r':
				b.WriteString(pad + c)
			case i == len(r)-1:
				b.WriteString(c)
			default:
				b.WriteString(c + pad)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

const pauseUsage = `Usage: spillctl pause QUEUE [--reason R] [--server URL] [--admin-key KEY] [--json]

Pauses a queue with the admitter's POST /v1/queues/{queue}/pause
(docs/design.md#pause): within a second its workers start none of its
jobs, admitted or queued, until "spillctl resume QUEUE". Admission goes
on: jobs wait in READY and the backlog, whose bound holds; nothing is
lost. Pausing a paused queue changes nothing. The call takes an admin key,
one of the admitter's http.admin_keys_file.

Examples:
  spillctl pause email --reason "mail provider maintenance"
  SPILLWAY_ADMIN_KEY=... spillctl pause email --json

Flags:
`

const resumeUsage = `Usage: spillctl resume QUEUE [--server URL] [--admin-key KEY] [--json]

Resumes a paused queue with the admitter's POST /v1/queues/{queue}/resume:
its workers start its jobs again, the backlog's at the leak rate. It
takes an admin key, one of the admitter's http.admin_keys_file.

Examples:
  spillctl resume email

Flags:
`

func runPause(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return pauseOrResume(ctx, "pause", pauseUsage, args, getenv, stdout)
}

func runResume(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return pauseOrResume(ctx, "resume", resumeUsage, args, getenv, stdout)
}

func pauseOrResume(ctx context.Context, verb, usage string, args []string, getenv func(string) string, stdout io.Writer) error {
	name := "spillctl " + verb
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	server := serverFlag(fs, getenv)
	adminKey := adminKeyFlag(fs, getenv) // limits.go
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`")
	asJSON := fs.Bool("json", false, "print the admitter's answer as JSON")
	var reason *string
	if verb == "pause" {
		reason = fs.String("reason", "", "why, kept with the pause and shown by spillctl queues (at most 200 characters)")
	}
	pos, done, err := parseArgs(fs, args, usage, stdout)
	if done || err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("%s: want one queue name, got %d arguments (see %s --help)", name, len(pos), name)
	}
	a, err := newAdmitter(name, *server, adminKey(), *timeout)
	if err != nil {
		return err
	}
	var rep *spillway.PauseReply
	if verb == "pause" {
		rep, err = a.c.Pause(ctx, pos[0], *reason)
	} else {
		rep, err = a.c.Resume(ctx, pos[0])
	}
	if err != nil {
		var pe *client.ProblemError
		switch {
		case errors.Is(err, client.ErrNotFound):
			return fmt.Errorf("%s: the admitter at %s has no queue %q (spillctl queues lists them)", name, a.base, pos[0])
		case errors.As(err, &pe) && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden):
			return fmt.Errorf("%s: %w; pause and resume take an admin key: set --admin-key or $SPILLWAY_ADMIN_KEY", name, a.explain(err))
		}
		return fmt.Errorf("%s: %w", name, a.explain(err))
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	state := "resumed"
	if rep.Paused {
		state = "paused"
	}
	line := fmt.Sprintf("%s: %s since %s by %s", rep.Queue, state, rep.At.Local().Format(time.DateTime), rep.By)
	if rep.Reason != "" {
		line += fmt.Sprintf(" (%s)", rep.Reason)
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}
