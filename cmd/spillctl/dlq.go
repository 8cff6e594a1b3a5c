package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const dlqUsage = `Usage: spillctl dlq <list|replay|purge> --queue Q [flags]

Manages a queue's dead letters: jobs that failed for good, kept in the
queue's DEAD stream (SPILLWAY_<queue>_DEAD) on NATS JetStream. These
commands talk to JetStream directly (--nats), not to the admitter.

  list     show dead letters: id, reason, attempts, last error, when, age
  replay   put dead letters back to work, in READY (default) or the backlog
  purge    delete dead letters for good

Run "spillctl dlq <command> --help" for its flags.
`

const dlqListUsage = `Usage: spillctl dlq list --queue Q [--limit N] [--nats URL] [--json]

Lists a queue's dead letters, oldest first: stream sequence, job id,
attempts, when it died and how long ago, why, and the last error.

Examples:
  spillctl dlq list --queue email
  spillctl dlq list --queue email --limit 0 --json | jq -r '.dead_letters[].id'

Flags:
`

const dlqReplayUsage = `Usage: spillctl dlq replay --queue Q (--id ID | --all) [--to ready|backlog]

Puts dead letters back to work: each is published again to the queue's
READY stream (or its backlog, drained at the leak rate) with its payload,
headers and job id, attempts reset to 0 and enqueued now. Only once
JetStream has acknowledged the copy is the dead letter deleted: if the
publish fails, the dead letter stays and the command exits 1.

If the admitter keeps job status (the spillway-jobs-NN buckets), the job's
record is reset to admitted (or queued) with 0 attempts before the publish,
so that "spillctl status" follows the new run, and put back if the publish
fails.

The copy gets a new Nats-Msg-Id (<job id>:replay:<dead letter seq>): the
job id itself may still be in the stream's duplicate window, where it would
be dropped as a duplicate. Replaying the same dead letter twice stores it
once while that window lasts. (Workers move jobs to DEAD and from the
backlog to READY under the message's stream place, not its job id, so a
replayed job that fails again is dead-lettered again.)

Examples:
  spillctl dlq replay --queue email --id 0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77
  spillctl dlq replay --queue email --all --to backlog

Flags:
`

const dlqPurgeUsage = `Usage: spillctl dlq purge --queue Q (--id ID | --all) [--yes]

Deletes dead letters for good. Asks for confirmation on a terminal;
without one (a script, a pipe) it refuses unless --yes is given. --all
deletes the dead letters counted when you confirmed; any that arrive
meanwhile are kept.

Examples:
  spillctl dlq purge --queue email --id 0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77
  spillctl dlq purge --queue email --all --yes

Flags:
`

func runDLQ(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	d := &dlq{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now, interactive: isTerminal}
	return d.run(ctx, args)
}

// dlq runs the dlq commands. now and interactive are seams for tests.
type dlq struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
	interactive    func(io.Reader) bool
}

func (d *dlq) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(d.stderr, dlqUsage)
		return errUsageShown
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(d.stdout, dlqUsage)
		return nil
	case "list":
		return d.list(ctx, args[1:])
	case "replay":
		return d.replay(ctx, args[1:])
	case "purge":
		return d.purge(ctx, args[1:])
	}
	return usageErrorf("spillctl dlq: unknown command %q; want list, replay or purge (see spillctl dlq --help)", args[0])
}

// dlqFlags are the flags every dlq command has.
type dlqFlags struct {
	queue, nats *string
	json        *bool
}

func (d *dlq) flags(name string) (*flag.FlagSet, dlqFlags) {
	fs := flag.NewFlagSet("spillctl dlq "+name, flag.ContinueOnError)
	return fs, dlqFlags{
		queue: fs.String("queue", "", "the `QUEUE` whose dead letters to "+name+" (required)"),
		nats:  natsFlag(fs, d.getenv),
		json:  fs.Bool("json", false, "print JSON"),
	}
}

// parse parses a dlq command's arguments; done is true after --help.
func (d *dlq) parse(fs *flag.FlagSet, f dlqFlags, args []string, head string) (bool, error) {
	pos, done, err := parseArgs(fs, args, head, d.stdout)
	if done || err != nil {
		return done, err
	}
	if len(pos) > 0 {
		return false, usageErrorf("%s: unexpected argument %q (see %s --help)", fs.Name(), pos[0], fs.Name())
	}
	if *f.queue == "" {
		return false, usageErrorf("%s: --queue is required", fs.Name())
	}
	if err := spillway.ValidateQueueName(*f.queue); err != nil {
		return false, usageErrorf("%s: --queue: %w", fs.Name(), err)
	}
	return false, nil
}

// dlqTimeout bounds opening the job-status bucket.
const dlqTimeout = 10 * time.Second

// open connects to NATS and opens queue q's dead letters; closeNATS ends the
// connection.
func (d *dlq) open(ctx context.Context, cmd, q, natsURL string) (dl *admin.DeadLetters, js jetstream.JetStream, closeNATS func(), err error) {
	nc, err := connectNATS(natsURL, "spillctl dlq", d.getenv)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if js, err = jetstream.New(nc); err == nil {
		dl, err = admin.OpenDeadLetters(ctx, js, q)
	}
	if err != nil {
		nc.Close()
		switch {
		case errors.Is(err, admin.ErrNoStream):
			return nil, nil, nil, fmt.Errorf("%s: queue %q has no dead-letter stream %s on %s (is the name right? a worker creates the streams when it first runs the queue)", cmd, q, queue.StreamName(q, queue.Dead), natsURL)
		case errors.Is(err, admin.ErrNoJetStream):
			return nil, nil, nil, fmt.Errorf("%s: NATS at %s has no JetStream (is --nats Spillway's server?)", cmd, natsURL)
		}
		return nil, nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return dl, js, nc.Close, nil
}

// deadLetter is what list shows of one dead letter.
type deadLetter struct {
	Seq          uint64     `json:"seq"`
	ID           string     `json:"id"`
	Reason       string     `json:"reason"`
	Attempts     int        `json:"attempts"`
	LastError    string     `json:"last_error,omitempty"`
	DeadAt       time.Time  `json:"dead_at"`
	AgeMS        int64      `json:"age_ms"`
	EnqueuedAt   *time.Time `json:"enqueued_at,omitempty"`
	SourceStream string     `json:"source_stream,omitempty"`
	PayloadBytes int        `json:"payload_bytes"`
}

func letterOf(l admin.DeadLetter, now time.Time) deadLetter {
	v := deadLetter{
		Seq: l.Seq, ID: l.ID, Reason: l.Reason, Attempts: l.Attempts, LastError: l.LastError, DeadAt: l.DeadAt,
		AgeMS: max(0, now.Sub(l.DeadAt).Milliseconds()), SourceStream: l.SourceStream, PayloadBytes: l.PayloadBytes,
	}
	if !l.EnqueuedAt.IsZero() {
		v.EnqueuedAt = &l.EnqueuedAt
	}
	return v
}

func (d *dlq) list(ctx context.Context, args []string) error {
	fs, f := d.flags("list")
	limit := fs.Int("limit", 50, "show at most `N` dead letters, oldest first (0: all)")
	if done, err := d.parse(fs, f, args, dlqListUsage); done || err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrorf("spillctl dlq list: --limit %d: want 0 (all) or more", *limit)
	}
	dl, _, closeNATS, err := d.open(ctx, "spillctl dlq list", *f.queue, *f.nats)
	if err != nil {
		return err
	}
	defer closeNATS()
	now := d.now()
	found, err := dl.List(ctx, admin.ListOptions{Limit: *limit})
	if err != nil {
		return fmt.Errorf("spillctl dlq list: %w", err)
	}
	letters := make([]deadLetter, 0, len(found))
	for _, l := range found {
		letters = append(letters, letterOf(l, now))
	}
	if *f.json {
		return writeJSON(d.stdout, struct {
			Queue       string       `json:"queue"`
			Stream      string       `json:"stream"`
			Total       uint64       `json:"total"`
			DeadLetters []deadLetter `json:"dead_letters"`
		}{dl.Queue(), dl.Stream(), dl.Total(), letters})
	}
	fmt.Fprint(d.stdout, formatDeadLetters(dl.Stream(), dl.Total(), letters, now))
	return nil
}

// formatDeadLetters prints the dead-letter table under a line that counts
// them.
func formatDeadLetters(stream string, total uint64, ls []deadLetter, now time.Time) string {
	var b strings.Builder
	switch {
	case total == 0:
		fmt.Fprintf(&b, "%s: no dead letters\n", stream)
		return b.String()
	case uint64(len(ls)) < total:
		fmt.Fprintf(&b, "%s: %d dead letters, the oldest %d shown (--limit 0 shows all)\n", stream, total, len(ls))
	default:
		fmt.Fprintf(&b, "%s: %d dead letter%s\n", stream, total, plural(total))
	}
	rows := [][]string{{"SEQ", "ID", "ATTEMPTS", "DEAD AT", "AGE", "REASON", "LAST ERROR"}}
	for _, l := range ls {
		id := l.ID
		if id == "" {
			id = "(not a job)"
		}
		rows = append(rows, []string{
			strconv.FormatUint(l.Seq, 10), id, strconv.Itoa(l.Attempts), fmtClock(l.DeadAt, now),
			fmtDur(time.Duration(l.AgeMS) * time.Millisecond), orDash(l.Reason), orDash(clip(l.LastError, 60)),
		})
	}
	b.WriteString(layout(rows, "rlrllll"))
	return b.String()
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func plural[N int | int64 | uint64](n N) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// replayed is the outcome of one dead letter's replay.
type replayed struct {
	DeadSeq uint64 `json:"dead_seq"`
	ID      string `json:"id"`
	// Stream and Seq: where the job is now, once replayed.
	Stream string `json:"stream,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	// Kept says why the dead letter was not replayed and stays.
	Kept string `json:"kept,omitempty"`
	// Warning: replayed, but the dead letter could not be deleted.
	Warning string `json:"warning,omitempty"`
	// Note: replayed, but the job's status record could not be reset
	// (status is advisory; the job itself is safe).
	Note string `json:"note,omitempty"`
}

func replayedOf(r admin.ReplayResult, q string) replayed {
	v := replayed{DeadSeq: r.DeadSeq, ID: r.ID, Stream: r.Stream, Seq: r.Seq, Kept: r.Kept, Warning: r.Warning, Note: r.Note}
	if v.Warning != "" {
		v.Warning += fmt.Sprintf("; delete it with spillctl dlq purge --queue %s --id %s --yes", q, r.ID)
	}
	return v
}

func (d *dlq) replay(ctx context.Context, args []string) error {
	fs, f := d.flags("replay")
	id := fs.String("id", "", "replay the dead letters of the job with this `ID`")
	all := fs.Bool("all", false, "replay every dead letter of the queue")
	to := fs.String("to", "ready", "`DEST`: ready (run now) | backlog (drained at the leak rate)")
	if done, err := d.parse(fs, f, args, dlqReplayUsage); done || err != nil {
		return err
	}
	if (*id == "") == !*all {
		return usageErrorf("spillctl dlq replay: give --id ID or --all")
	}
	var dest queue.Destination
	switch *to {
	case "ready":
		dest = queue.Ready
	case "backlog":
		dest = queue.Backlog
	default:
		return usageErrorf("spillctl dlq replay: --to %q: want ready or backlog", *to)
	}
	dl, js, closeNATS, err := d.open(ctx, "spillctl dlq replay", *f.queue, *f.nats)
	if err != nil {
		return err
	}
	defer closeNATS()
	destName := queue.StreamName(dl.Queue(), dest)
	opts := admin.ReplayOptions{To: dest, Now: d.now}

	targets, err := dl.List(ctx, admin.ListOptions{JobID: *id})
	if err != nil {
		return fmt.Errorf("spillctl dlq replay: %w", err)
	}
	if len(targets) > 0 {
		status, err := d.statusStore(ctx, js)
		if err != nil {
			fmt.Fprintf(d.stderr, "spillctl dlq replay: job status records will not be reset: %v\n", err)
		}
		if status != nil {
			opts.Prepare = status.ResetForReplay
		}
	}
	var results []replayed
	failed := 0
	opts.Report = func(r admin.ReplayResult) {
		res := replayedOf(r, dl.Queue())
		if res.Kept != "" || res.Warning != "" {
			failed++
		}
		results = append(results, res)
		if !*f.json {
			fmt.Fprintln(d.stdout, formatReplayed(res))
		}
	}
	// Replay checks the destination before anything, even with nothing
	// to replay; an error with no result and ctx alive is that check's.
	_, rerr := dl.Replay(ctx, targets, opts)
	if rerr != nil && len(results) == 0 && ctx.Err() == nil {
		return fmt.Errorf("spillctl dlq replay: cannot replay to %s: %w; nothing was replayed and the dead letters stay (has a worker run queue %s? it creates the streams)", destName, rerr, dl.Queue())
	}
	if len(targets) == 0 && rerr == nil {
		if *all {
			fmt.Fprintf(d.stdout, "%s: no dead letters to replay\n", dl.Stream())
			return nil
		}
		return fmt.Errorf("spillctl dlq replay: no dead letter of job %s in %s (spillctl dlq list --queue %s shows them)", *id, dl.Stream(), dl.Queue())
	}
	if *f.json {
		if err := writeJSON(d.stdout, struct {
			Queue    string     `json:"queue"`
			To       string     `json:"to"`
			Replayed []replayed `json:"results"`
		}{dl.Queue(), destName, results}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(d.stdout, "replayed %d of %d dead letter%s to %s\n", len(results)-countKept(results), len(targets), plural(len(targets)), destName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("spillctl dlq replay: interrupted after %d of %d dead letters: %w", len(results), len(targets), err)
	}
	if rerr != nil {
		return fmt.Errorf("spillctl dlq replay: %w", rerr)
	}
	if failed > 0 {
		return fmt.Errorf("spillctl dlq replay: %d of %d dead letters need attention (see above); the ones kept stay in %s", failed, len(targets), dl.Stream())
	}
	return nil
}

func countKept(rs []replayed) int {
	n := 0
	for _, r := range rs {
		if r.Kept != "" {
			n++
		}
	}
	return n
}

func formatReplayed(r replayed) string {
	id := r.ID
	if id == "" {
		id = "(not a job)"
	}
	switch {
	case r.Kept != "":
		return fmt.Sprintf("kept      %s (dead letter %d): %s", id, r.DeadSeq, r.Kept)
	case r.Warning != "":
		return fmt.Sprintf("replayed  %s → %s seq %d, but: %s", id, r.Stream, r.Seq, r.Warning)
	case r.Note != "":
		return fmt.Sprintf("replayed  %s → %s seq %d (%s)", id, r.Stream, r.Seq, r.Note)
	}
	return fmt.Sprintf("replayed  %s → %s seq %d", id, r.Stream, r.Seq)
}

// statusStore opens the admitter's job-status bucket as it is, or returns
// nil when there is none.
func (d *dlq) statusStore(ctx context.Context, js jetstream.JetStream) (*jobstatus.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, dlqTimeout)
	defer cancel()
	return jobstatus.OpenExisting(ctx, js)
}

func (d *dlq) purge(ctx context.Context, args []string) error {
	fs, f := d.flags("purge")
	id := fs.String("id", "", "purge the dead letters of the job with this `ID`")
	all := fs.Bool("all", false, "purge every dead letter of the queue")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if done, err := d.parse(fs, f, args, dlqPurgeUsage); done || err != nil {
		return err
	}
	if (*id == "") == !*all {
		return usageErrorf("spillctl dlq purge: give --id ID or --all")
	}
	dl, _, closeNATS, err := d.open(ctx, "spillctl dlq purge", *f.queue, *f.nats)
	if err != nil {
		return err
	}
	defer closeNATS()
	stream := dl.Stream()

	var seqs []uint64
	var what string
	if *all {
		n := dl.Total()
		if n == 0 {
			return d.purged(*f.json, stream, 0)
		}
		what = fmt.Sprintf("all %d dead letter%s of queue %s (%s)", n, plural(n), dl.Queue(), stream)
	} else {
		letters, err := dl.List(ctx, admin.ListOptions{JobID: *id})
		if err != nil {
			return fmt.Errorf("spillctl dlq purge: %w", err)
		}
		for _, l := range letters {
			seqs = append(seqs, l.Seq)
		}
		if len(seqs) == 0 {
			return fmt.Errorf("spillctl dlq purge: no dead letter of job %s in %s (spillctl dlq list --queue %s shows them)", *id, stream, dl.Queue())
		}
		what = fmt.Sprintf("%d dead letter%s of job %s from %s", len(seqs), plural(len(seqs)), *id, stream)
	}
	if !*yes {
		if err := d.confirm("Purge " + what + " for good?"); err != nil {
			return err
		}
	}
	var n int
	if *all {
		// Up to the last one counted: later arrivals were not confirmed.
		n, err = dl.PurgeAll(ctx)
	} else {
		n, err = dl.Purge(ctx, seqs)
	}
	if err != nil {
		return fmt.Errorf("spillctl dlq purge: %w", err)
	}
	return d.purged(*f.json, stream, n)
}

func (d *dlq) purged(asJSON bool, stream string, n int) error {
	if asJSON {
		return writeJSON(d.stdout, struct {
			Stream string `json:"stream"`
			Purged int    `json:"purged"`
		}{stream, n})
	}
	fmt.Fprintf(d.stdout, "purged %d dead letter%s from %s\n", n, plural(n), stream)
	return nil
}

// confirm asks on the terminal; without one it refuses.
func (d *dlq) confirm(question string) error {
	if !d.interactive(d.stdin) {
		return fmt.Errorf("spillctl dlq purge: refusing without confirmation: stdin is not a terminal to ask on; pass --yes to purge")
	}
	fmt.Fprintf(d.stderr, "%s [y/N] ", question)
	answer, err := bufio.NewReader(d.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("spillctl dlq purge: reading the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("spillctl dlq purge: not confirmed; nothing purged")
}
