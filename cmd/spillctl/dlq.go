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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
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

If the admitter keeps job status (the spillway-jobs bucket), the job's
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
	if err := queue.ValidateQueueName(*f.queue); err != nil {
		return false, usageErrorf("%s: --queue: %w", fs.Name(), err)
	}
	return false, nil
}

// deadQueue is a queue's DEAD stream, opened.
type deadQueue struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	dead jetstream.Stream
	info *jetstream.StreamInfo // when opened
}

// apiTimeout bounds one JetStream API call.
const apiTimeout = 10 * time.Second

func (d *dlq) open(ctx context.Context, cmd, q, natsURL string) (*deadQueue, error) {
	nc, err := connectNATS(natsURL, "spillctl dlq")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	name := queue.StreamName(q, queue.Dead)
	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	s, err := js.Stream(octx, name)
	if err != nil {
		nc.Close()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("%s: queue %q has no dead-letter stream %s on %s (is the name right? a worker creates the streams when it first runs the queue)", cmd, q, name, natsURL)
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders):
			return nil, fmt.Errorf("%s: NATS at %s has no JetStream (is --nats Spillway's server?)", cmd, natsURL)
		}
		return nil, fmt.Errorf("%s: reading stream %s: %w", cmd, name, err)
	}
	return &deadQueue{name: q, nc: nc, js: js, dead: s, info: s.CachedInfo()}, nil
}

func (q *deadQueue) close() { q.nc.Close() }

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

// letterOf reads a dead letter's headers (the job's and those the worker
// adds, pkg/queue/dead.go).
func letterOf(seq uint64, h nats.Header, stored time.Time, size int, now time.Time) deadLetter {
	l := deadLetter{
		Seq: seq, ID: h.Get(queue.HeaderJobID), Reason: h.Get(queue.HeaderDeadReason),
		LastError: h.Get(queue.HeaderLastError), SourceStream: h.Get(queue.HeaderSourceStream), PayloadBytes: size,
	}
	l.Attempts, _ = strconv.Atoi(h.Get(queue.HeaderAttempt))
	l.DeadAt = stored
	if t, err := time.Parse(time.RFC3339Nano, h.Get(queue.HeaderDeadAt)); err == nil {
		l.DeadAt = t
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(queue.HeaderEnqueuedAt)); err == nil {
		l.EnqueuedAt = &t
	}
	l.AgeMS = max(0, now.Sub(l.DeadAt).Milliseconds())
	return l
}

// scan calls fn with each dead letter there was when the stream was
// opened, oldest first, headers only, until fn returns false.
func (q *deadQueue) scan(ctx context.Context, now time.Time, fn func(deadLetter) bool) error {
	last := q.info.State.LastSeq
	if q.info.State.Msgs == 0 {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	cons, err := q.js.OrderedConsumer(octx, q.info.Config.Name, jetstream.OrderedConsumerConfig{
		HeadersOnly: true, InactiveThreshold: 30 * time.Second,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("reading %s: %w", q.info.Config.Name, err)
	}
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return fmt.Errorf("reading %s: %w", q.info.Config.Name, err)
		}
		// The batch is read to its end even after the last wanted message,
		// so that the fetch's goroutine ends before the connection closes.
		n, done, mdErr := 0, false, error(nil)
		for m := range batch.Messages() {
			n++
			if done {
				continue
			}
			md, err := m.Metadata()
			if err != nil {
				done, mdErr = true, err
				continue
			}
			seq := md.Sequence.Stream
			if seq > last {
				done = true
				continue
			}
			size, _ := strconv.Atoi(m.Headers().Get("Nats-Msg-Size"))
			if !fn(letterOf(seq, m.Headers(), md.Timestamp, size, now)) || seq == last || md.NumPending == 0 {
				done = true
			}
		}
		if mdErr != nil {
			return fmt.Errorf("reading %s: %w", q.info.Config.Name, mdErr)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("reading %s: %w", q.info.Config.Name, err)
		}
		if done {
			return nil
		}
		if n == 0 {
			return ctx.Err() // nothing left (some were deleted meanwhile)
		}
	}
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
	q, err := d.open(ctx, "spillctl dlq list", *f.queue, *f.nats)
	if err != nil {
		return err
	}
	defer q.close()
	now := d.now()
	letters := []deadLetter{}
	err = q.scan(ctx, now, func(l deadLetter) bool {
		letters = append(letters, l)
		return *limit == 0 || len(letters) < *limit
	})
	if err != nil {
		return fmt.Errorf("spillctl dlq list: %w", err)
	}
	total := q.info.State.Msgs
	if *f.json {
		return writeJSON(d.stdout, struct {
			Queue       string       `json:"queue"`
			Stream      string       `json:"stream"`
			Total       uint64       `json:"total"`
			DeadLetters []deadLetter `json:"dead_letters"`
		}{q.name, q.info.Config.Name, total, letters})
	}
	fmt.Fprint(d.stdout, formatDeadLetters(q.info.Config.Name, total, letters, now))
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
	q, err := d.open(ctx, "spillctl dlq replay", *f.queue, *f.nats)
	if err != nil {
		return err
	}
	defer q.close()

	// The destination must exist before anything is tried.
	destName := queue.StreamName(q.name, dest)
	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	ds, err := q.js.Stream(octx, destName)
	var destDup time.Duration
	if err == nil {
		destDup = ds.CachedInfo().Config.Duplicates
	}
	cancel()
	if err != nil {
		return fmt.Errorf("spillctl dlq replay: cannot replay to %s: %w; nothing was replayed and the dead letters stay (has a worker run queue %s? it creates the streams)", destName, err, q.name)
	}

	now := d.now()
	var targets []deadLetter
	if err := q.scan(ctx, now, func(l deadLetter) bool {
		if *all || l.ID == *id {
			targets = append(targets, l)
		}
		return true
	}); err != nil {
		return fmt.Errorf("spillctl dlq replay: %w", err)
	}
	if len(targets) == 0 {
		if *all {
			fmt.Fprintf(d.stdout, "%s: no dead letters to replay\n", q.info.Config.Name)
			return nil
		}
		return fmt.Errorf("spillctl dlq replay: no dead letter of job %s in %s (spillctl dlq list --queue %s shows them)", *id, q.info.Config.Name, q.name)
	}

	status, err := q.statusStore(ctx)
	if err != nil {
		fmt.Fprintf(d.stderr, "spillctl dlq replay: job status records will not be reset: %v\n", err)
	}
	r := replayer{
		q: q, dest: dest, destName: destName, status: status,
		destDup: destDup,
	}
	var results []replayed
	failed := 0
	for _, l := range targets {
		if ctx.Err() != nil {
			break
		}
		res := r.replayOne(ctx, l, d.now())
		if res.Kept != "" || res.Warning != "" {
			failed++
		}
		results = append(results, res)
		if !*f.json {
			fmt.Fprintln(d.stdout, formatReplayed(res))
		}
	}
	if *f.json {
		if err := writeJSON(d.stdout, struct {
			Queue    string     `json:"queue"`
			To       string     `json:"to"`
			Replayed []replayed `json:"results"`
		}{q.name, destName, results}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(d.stdout, "replayed %d of %d dead letter%s to %s\n", len(results)-countKept(results), len(targets), plural(len(targets)), destName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("spillctl dlq replay: interrupted after %d of %d dead letters: %w", len(results), len(targets), err)
	}
	if failed > 0 {
		return fmt.Errorf("spillctl dlq replay: %d of %d dead letters need attention (see above); the ones kept stay in %s", failed, len(targets), q.info.Config.Name)
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

// replayer moves dead letters back to a queue's READY or BACKLOG stream.
type replayer struct {
	q        *deadQueue
	dest     queue.Destination
	destName string
	status   *jobstatus.Store // nil: the admitter keeps no job status
	// The destination's duplicate window.
	destDup time.Duration
}

// deadHeaders are the headers a worker adds to a dead letter; a replayed
// job does not carry them.
var deadHeaders = []string{
	queue.HeaderDeadReason, queue.HeaderLastError, queue.HeaderDeadAt, queue.HeaderSourceStream, queue.HeaderSourceSeq,
}

// replayOne publishes dead letter l to the destination and, once
// JetStream acknowledged it, deletes the dead letter. Whatever fails
// before that acknowledgement leaves the dead letter where it is.
func (r *replayer) replayOne(ctx context.Context, l deadLetter, now time.Time) replayed {
	res := replayed{DeadSeq: l.Seq, ID: l.ID}
	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	raw, err := r.q.dead.GetMsg(octx, l.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		res.Kept = "gone meanwhile (replayed or purged by someone else?)"
		return res
	}
	if err != nil {
		res.Kept = "reading it failed: " + err.Error()
		return res
	}
	job, err := queue.ParseJob(raw.Header, raw.Data)
	if err != nil {
		res.Kept = fmt.Sprintf("not a job, so it cannot be replayed (%v); purge it by hand (nats stream rmm %s %d)", err, r.q.info.Config.Name, l.Seq)
		return res
	}
	if job.Queue != r.q.name {
		res.Kept = fmt.Sprintf("it is a job of queue %q, not %q", job.Queue, r.q.name)
		return res
	}
	token := raw.Subject[strings.LastIndexByte(raw.Subject, '.')+1:]
	m := nats.NewMsg("spillway." + r.dest.String() + "." + r.q.name + "." + token)
	for k, vs := range raw.Header {
		if !strings.HasPrefix(k, "Nats-") {
			m.Header[k] = append([]string(nil), vs...)
		}
	}
	for _, k := range deadHeaders {
		m.Header.Del(k)
	}
	m.Header.Del(queue.HeaderNotBefore) // due at once
	m.Header.Set(queue.HeaderAttempt, "0")
	m.Header.Set(queue.HeaderEnqueuedAt, now.UTC().Format(time.RFC3339Nano))
	// Not the job id, which the destination may still hold in its
	// duplicate window; the same for every replay of this dead letter.
	m.Header.Set(nats.MsgIdHdr, job.ID+":replay:"+strconv.FormatUint(l.Seq, 10))
	m.Data = raw.Data
	restore, note := r.resetStatus(octx, job, l, now)
	ack, err := r.q.js.PublishMsg(octx, m, jetstream.WithExpectStream(r.destName))
	if err != nil {
		restore()
		res.Kept = fmt.Sprintf("publishing to %s failed: %v", r.destName, err)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			switch {
			case r.dest == queue.Ready && apiErr.Description == "maximum messages exceeded":
				res.Kept += " (READY is full, at ready.capacity: replay --to backlog, or wait for workers to take jobs)"
			case apiErr.Description == "maximum messages exceeded":
				res.Kept += " (the backlog is full: replay --to ready, or wait for it to drain)"
			case apiErr.Description == "maximum messages per subject exceeded":
				res.Kept += " (this key's share of the backlog is full: replay --to ready, or wait for it to drain)"
			}
		}
		return res
	}
	res.Stream, res.Seq, res.Note = ack.Stream, ack.Sequence, note
	if err := r.q.dead.DeleteMsg(octx, l.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		res.Warning = fmt.Sprintf("deleting dead letter %d failed (%v): it is still listed, and replaying it again within %s stores nothing new; delete it with spillctl dlq purge --queue %s --id %s --yes",
			l.Seq, err, fmtDur(r.destDup), r.q.name, job.ID)
	}
	return res
}

// statusStore opens the admitter's job-status bucket with the settings it
// has — so that opening changes nothing — or returns nil when there is none.
func (q *deadQueue) statusStore(ctx context.Context) (*jobstatus.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	kv, err := q.js.KeyValue(ctx, jobstatus.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", jobstatus.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", jobstatus.Bucket, err)
	}
	cfg := st.Config()
	return jobstatus.Open(ctx, q.js, cfg.TTL, cfg.Replicas)
}

// resetStatus makes the job's status record say it was just admitted (or
// queued) with no tries yet: workers only ever advance a record, and would
// leave a dead one dead. restore puts back what was there, for a replay
// that failed. Status is advisory: a failure is a note, not an error.
func (r *replayer) resetStatus(ctx context.Context, job queue.Job, l deadLetter, now time.Time) (restore func(), note string) {
	restore = func() {}
	if r.status == nil || jobstatus.ValidateID(job.ID) != nil {
		return restore, ""
	}
	prev, err := r.status.Get(ctx, job.ID)
	switch {
	case errors.Is(err, jobstatus.ErrNotFound):
		// Expired: what it would say is that the job is dead.
		prev = jobstatus.Record{
			ID: job.ID, Queue: job.Queue, State: jobstatus.Dead, Attempts: l.Attempts, LastError: l.LastError,
			EnqueuedAt: job.EnqueuedAt, FinishedAt: l.DeadAt, UpdatedAt: l.DeadAt,
		}
	case err != nil:
		return restore, "its status record was not reset: " + err.Error()
	}
	state := jobstatus.Admitted
	if r.dest == queue.Backlog {
		state = jobstatus.Queued
	}
	reset := jobstatus.Record{ID: job.ID, Queue: job.Queue, State: state, LastError: prev.LastError, EnqueuedAt: now, UpdatedAt: now}
	if err := r.status.Put(ctx, reset); err != nil {
		return restore, "its status record was not reset: " + err.Error()
	}
	return func() { _ = r.status.Put(context.WithoutCancel(ctx), prev) }, ""
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
	q, err := d.open(ctx, "spillctl dlq purge", *f.queue, *f.nats)
	if err != nil {
		return err
	}
	defer q.close()
	stream := q.info.Config.Name

	var seqs []uint64
	var what string
	if *all {
		n := q.info.State.Msgs
		if n == 0 {
			return d.purged(*f.json, stream, 0)
		}
		what = fmt.Sprintf("all %d dead letter%s of queue %s (%s)", n, plural(n), q.name, stream)
	} else {
		if err := q.scan(ctx, d.now(), func(l deadLetter) bool {
			if l.ID == *id {
				seqs = append(seqs, l.Seq)
			}
			return true
		}); err != nil {
			return fmt.Errorf("spillctl dlq purge: %w", err)
		}
		if len(seqs) == 0 {
			return fmt.Errorf("spillctl dlq purge: no dead letter of job %s in %s (spillctl dlq list --queue %s shows them)", *id, stream, q.name)
		}
		what = fmt.Sprintf("%d dead letter%s of job %s from %s", len(seqs), plural(len(seqs)), *id, stream)
	}
	if !*yes {
		if err := d.confirm("Purge " + what + " for good?"); err != nil {
			return err
		}
	}

	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if *all {
		// Up to the last one counted: later arrivals were not confirmed.
		last := q.info.State.LastSeq
		if err := q.dead.Purge(octx, jetstream.WithPurgeSequence(last+1)); err != nil {
			return fmt.Errorf("spillctl dlq purge: purging %s: %w", stream, err)
		}
		return d.purged(*f.json, stream, int(q.info.State.Msgs))
	}
	n := 0
	for _, seq := range seqs {
		if err := q.dead.DeleteMsg(octx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("spillctl dlq purge: deleting dead letter %d from %s (%d of %d deleted): %w", seq, stream, n, len(seqs), err)
		}
		n++
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
