package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// apiTimeout bounds one JetStream API call of DeadLetters.
const apiTimeout = 10 * time.Second

// DeadLetters manages a queue's dead letters, the jobs in its DEAD stream:
// list them, replay them to READY or the backlog, purge them. It sees the
// stream as it was when opened: List, Replay and PurgeAll go no further
// than the last dead letter there was then, so what arrives meanwhile is
// never touched by an operator who did not see it.
type DeadLetters struct {
	js    jetstream.JetStream
	queue string
	dead  jetstream.Stream
	info  *jetstream.StreamInfo // when opened
}

// OpenDeadLetters opens queue's DEAD stream. A stream that does not exist
// is ErrNoStream; a server without JetStream ErrNoJetStream.
func OpenDeadLetters(ctx context.Context, js jetstream.JetStream, q string) (*DeadLetters, error) {
	if err := spillway.ValidateQueueName(q); err != nil {
		return nil, err
	}
	name := queue.StreamName(q, queue.Dead)
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, streamError(name, err)
	}
	return &DeadLetters{js: js, queue: q, dead: s, info: s.CachedInfo()}, nil
}

func streamError(name string, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w %s: %w", ErrNoStream, name, err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: %w", ErrNoJetStream, err)
	}
	return fmt.Errorf("admin: reading stream %s: %w", name, err)
}

// Queue is the queue's name.
func (d *DeadLetters) Queue() string { return d.queue }

// Stream is the DEAD stream's name.
func (d *DeadLetters) Stream() string { return d.info.Config.Name }

// Total is how many dead letters there were when the stream was opened.
func (d *DeadLetters) Total() uint64 { return d.info.State.Msgs }

// DeadLetter is what a dead letter's headers say of it.
type DeadLetter struct {
	Seq uint64 // its place in the DEAD stream
	// ID is the job's id: empty for a message that is not a job.
	ID        string
	Reason    string // HeaderDeadReason
	Attempts  int    // tries it had
	LastError string // HeaderLastError
	// DeadAt is when it was moved (queue.HeaderDeadAt, or else when DEAD
	// stored it).
	DeadAt time.Time
	// EnqueuedAt is when the job was submitted (zero if unknown).
	EnqueuedAt time.Time
	// SourceStream and SourceSeq say where it was.
	SourceStream string
	SourceSeq    uint64
	PayloadBytes int
}

// deadLetterOf reads a dead letter's headers (those the move to DEAD sets,
// and the job's).
func deadLetterOf(seq uint64, h nats.Header, stored time.Time, size int) DeadLetter {
	l := DeadLetter{
		Seq: seq, ID: h.Get(spillway.HeaderJobID), Reason: h.Get(queue.HeaderDeadReason),
		LastError: h.Get(queue.HeaderLastError), SourceStream: h.Get(queue.HeaderSourceStream), PayloadBytes: size,
		DeadAt: stored,
	}
	l.Attempts, _ = strconv.Atoi(h.Get(spillway.HeaderAttempt))
	l.SourceSeq, _ = strconv.ParseUint(h.Get(queue.HeaderSourceSeq), 10, 64)
	if t, err := time.Parse(time.RFC3339Nano, h.Get(queue.HeaderDeadAt)); err == nil {
		l.DeadAt = t
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(queue.HeaderEnqueuedAt)); err == nil {
		l.EnqueuedAt = t
	}
	return l
}

// ListOptions select dead letters, oldest first.
type ListOptions struct {
	// JobID keeps only the dead letters of this job (a job replayed and
	// dead again has several). Empty: every dead letter.
	JobID string
	// After skips dead letters up to this sequence: for paging, pass the
	// last Seq of the previous page.
	After uint64
	// Limit is the most to return (0: all).
	Limit int
}

// List reads dead letters, oldest first, headers only.
func (d *DeadLetters) List(ctx context.Context, o ListOptions) ([]DeadLetter, error) {
	if o.Limit < 0 {
		return nil, fmt.Errorf("admin: listing dead letters: limit %d: want 0 (all) or more", o.Limit)
	}
	letters := []DeadLetter{}
	err := d.scan(ctx, o.After, func(l DeadLetter) bool {
		if o.JobID == "" || l.ID == o.JobID {
			letters = append(letters, l)
		}
		return o.Limit == 0 || len(letters) < o.Limit
	})
	return letters, err
}

// scan calls fn with each dead letter after seq there was when the stream
// was opened, oldest first, headers only, until fn returns false.
func (d *DeadLetters) scan(ctx context.Context, after uint64, fn func(DeadLetter) bool) error {
	last := d.info.State.LastSeq
	if d.info.State.Msgs == 0 || after >= last {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: true, InactiveThreshold: 30 * time.Second}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	cons, err := d.js.OrderedConsumer(octx, d.Stream(), cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("reading %s: %w", d.Stream(), err)
	}
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return fmt.Errorf("reading %s: %w", d.Stream(), err)
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
			if !fn(deadLetterOf(seq, m.Headers(), md.Timestamp, size)) || seq == last || md.NumPending == 0 {
				done = true
			}
		}
		if mdErr != nil {
			return fmt.Errorf("reading %s: %w", d.Stream(), mdErr)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("reading %s: %w", d.Stream(), err)
		}
		if done {
			return nil
		}
		if n == 0 {
			return ctx.Err() // nothing left (some were deleted meanwhile)
		}
	}
}

// ReplayOptions say where and how dead letters are replayed.
type ReplayOptions struct {
	// To is Ready (run now) or Backlog (drained at the leak rate).
	To queue.Destination
	// Now is the replay's clock (default time.Now): the replayed job's
	// enqueued-at.
	Now func() time.Time
	// Prepare, if set, is called before each publish with the job and
	// where it goes, for what must change with it (the job-status record:
	// workers only advance a record, and would leave a dead one dead). If
	// the publish fails, undo (if not nil) is called. A note is reported
	// in the result; it does not stop the replay.
	Prepare func(ctx context.Context, job queue.Job, l DeadLetter, to queue.Destination, now time.Time) (undo func(), note string)
	// Report, if set, is called with each result as it is known.
	Report func(ReplayResult)
}

// ReplayResult is the outcome of one dead letter's replay.
type ReplayResult struct {
	DeadSeq uint64
	ID      string
	// Stream and Seq: where the job is now, once replayed.
	Stream string
	Seq    uint64
	// Kept says why the dead letter was not replayed and stays.
	Kept string
	// Warning: replayed, but the dead letter could not be deleted. It is
	// still listed, and replaying it again within the destination's
	// duplicate window stores nothing new.
	Warning string
	// Note: replayed, with a note from ReplayOptions.Prepare.
	Note string
}

// Replay puts dead letters back to work, oldest first: each is moved to
// READY or the backlog with its payload, headers and job id, attempts
// reset to 0, no not-before, and enqueued now. Only once JetStream has
// acknowledged the copy is the dead letter deleted: when the destination
// is full, or anything else fails first, the dead letter stays and its
// result's Kept says why.
//
// The copy's message id is <job id>:replay:<dead letter seq>: not the job
// id, which the destination may still hold in its duplicate window, where
// the copy would be dropped as a duplicate; and the same for every replay
// of this dead letter, so replaying it twice within the window stores it
// once.
//
// A destination stream that does not exist is an error before anything
// is tried (ErrNoStream). If ctx ends, the results so far are returned
// with its error.
func (d *DeadLetters) Replay(ctx context.Context, letters []DeadLetter, o ReplayOptions) ([]ReplayResult, error) {
	if o.To != queue.Ready && o.To != queue.Backlog {
		return nil, fmt.Errorf("admin: replaying dead letters to %v: want ready or backlog", o.To)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	destName := queue.StreamName(d.queue, o.To)
	octx, cancel := context.WithTimeout(ctx, apiTimeout)
	ds, err := d.js.Stream(octx, destName)
	cancel()
	if err != nil {
		return nil, streamError(destName, err)
	}
	window := ds.CachedInfo().Config.Duplicates
	var results []ReplayResult
	for _, l := range letters {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		res := d.replayOne(ctx, l, o, window)
		results = append(results, res)
		if o.Report != nil {
			o.Report(res)
		}
	}
	return results, ctx.Err()
}

// replayOne moves dead letter l to the destination.
func (d *DeadLetters) replayOne(ctx context.Context, l DeadLetter, o ReplayOptions, window time.Duration) ReplayResult {
	res := ReplayResult{DeadSeq: l.Seq, ID: l.ID}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	raw, err := d.dead.GetMsg(ctx, l.Seq)
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
		res.Kept = fmt.Sprintf("not a job, so it cannot be replayed (%v); purge it by hand (nats stream rmm %s %d)", err, d.Stream(), l.Seq)
		return res
	}
	if job.Queue != d.queue {
		res.Kept = fmt.Sprintf("it is a job of queue %q, not %q", job.Queue, d.queue)
		return res
	}
	now := o.Now()
	mv := queue.ReplayMove(queue.Source{Queue: d.queue, Subject: raw.Subject, Stream: d.Stream(), Seq: l.Seq, Header: raw.Header, Data: raw.Data}, o.To, job.ID, now)
	undo, note := func() {}, ""
	if o.Prepare != nil {
		if u, n := o.Prepare(ctx, job, l, o.To, now); u != nil {
			undo, note = u, n
		} else {
			note = n
		}
	}
	ack, err := mv.Do(ctx, d.js, func(ctx context.Context) error {
		if err := d.dead.DeleteMsg(ctx, l.Seq); err != nil && !gone(err) {
			return err
		}
		return nil
	})
	if ack == nil {
		undo()
		res.Kept = fmt.Sprintf("publishing to %s failed: %v", queue.StreamName(d.queue, o.To), err)
		switch {
		case errors.Is(err, queue.ErrReadyFull):
			res.Kept += " (READY is full, at ready.capacity: replay to the backlog, or wait for workers to take jobs)"
		case errors.Is(err, queue.ErrKeyQueueFull):
			res.Kept += " (this key's share of the backlog is full: replay to READY, or wait for it to drain)"
		case errors.Is(err, queue.ErrQueueFull):
			res.Kept += " (the backlog is full: replay to READY, or wait for it to drain)"
		}
		return res
	}
	res.Stream, res.Seq, res.Note = ack.Stream, ack.Sequence, note
	if err != nil {
		res.Warning = fmt.Sprintf("deleting dead letter %d failed (%v): it is still listed, and replaying it again within %v stores nothing new", l.Seq, err, window)
	}
	return res
}

// Purge deletes the dead letters at seqs for good; one already gone counts
// as deleted. It returns how many it deleted.
func (d *DeadLetters) Purge(ctx context.Context, seqs []uint64) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	n := 0
	for _, seq := range seqs {
		if err := d.dead.DeleteMsg(ctx, seq); err != nil && !gone(err) {
			return n, fmt.Errorf("deleting dead letter %d from %s (%d of %d deleted): %w", seq, d.Stream(), n, len(seqs), err)
		}
		n++
	}
	return n, nil
}

// gone reports an error of a delete whose message is already gone
// (deleted by someone else meanwhile): what the delete was for. JetStream
// answers such a delete with its error code 10043 (sequence not found),
// which the client passes on only as text inside
// ErrMsgDeleteUnsuccessful.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "err_code=10043")
}

// PurgeAll deletes every dead letter there was when the stream was
// opened, and returns how many that was; later arrivals stay. The stream
// itself stays, ready for new dead letters.
func (d *DeadLetters) PurgeAll(ctx context.Context) (int, error) {
	if d.info.State.Msgs == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := d.dead.Purge(ctx, jetstream.WithPurgeSequence(d.info.State.LastSeq+1)); err != nil {
		return 0, fmt.Errorf("purging %s: %w", d.Stream(), err)
	}
	return int(d.info.State.Msgs), nil
}
