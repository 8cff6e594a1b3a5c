package jobstatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const (
	// firstBuffer bounds the records a FirstWriter holds unwritten that
	// came alone (Add), firstBatches the batches (AddBatch).
	firstBuffer  = 4096
	firstBatches = 64
	// firstMaxPending bounds the FirstWriter's publishes that the server
	// has not acknowledged yet.
	firstMaxPending = 4096
)

// FirstRecord is the first record of job j, answered st (Admitted or
// Queued) and stored at at: a queued job's record says where the job is
// in its backlog, for a cancel to find it.
func FirstRecord(j *queue.Job, st spillway.State, at queue.Stored) Record {
	r := Record{ID: j.ID, Queue: j.Queue, State: st, EnqueuedAt: j.EnqueuedAt, NotBefore: j.NotBefore, UpdatedAt: j.EnqueuedAt,
		Submitter: j.Header.Get(spillway.HeaderSubmitter)}
	if st == spillway.StateQueued {
		r.BacklogSeq = at.Sequence // where a cancel finds it
	}
	return r
}

// FirstWriter writes the admitter's first record of each job it stores —
// admitted or queued — as the Recorder writes the workers' records after
// it. Add and AddBatch take the records as the submissions are answered;
// Run writes them.
//
// Add and AddBatch never block a submission: they put the records in a
// bounded buffer (4096 records that came alone, 64 batches), and when it
// is full they drop them and count them. Status is advisory — the job
// itself is stored whatever its record says — so a missing first record
// is better than a slow answer.
//
// # Writes
//
// Run writes the records as asynchronous JetStream publishes (CreateMsg),
// on a JetStream context of the FirstWriter's own: a record is advisory
// and must not cost a round trip each, so the connection batches them with
// everything else it sends. The server refuses the record of a job that
// has one already — a worker started it first — as Create would. A
// batch's records go out as few group records (FirstMsgs), which a
// worker's record of a job takes precedence over.
//
// # Dropped records
//
// The dropped function given to NewFirstWriter is told of every record
// not written: its buffer was full, it was not valid, its publish failed,
// or the server refused it for any reason but a record that was there
// first. A group record refused counts all its jobs' records, whatever
// the reason: a group is written once, by its batch alone.
type FirstWriter struct {
	js      jetstream.JetStream
	log     *slog.Logger
	dropped func(records int)
	singles chan Record
	batches chan []Record // a batch's first records, written together
}

// NewFirstWriter returns a FirstWriter that publishes on nc, logging each
// record it could not write to logger at debug level (nil: slog.Default())
// and counting them with dropped (nil: not counted), which is called from
// any goroutine — Add's callers, Run, and nc's — and must be safe for
// concurrent use. Nothing is written until Run.
func NewFirstWriter(nc *nats.Conn, logger *slog.Logger, dropped func(records int)) (*FirstWriter, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if dropped == nil {
		dropped = func(int) {}
	}
	w := &FirstWriter{log: logger, dropped: dropped, singles: make(chan Record, firstBuffer), batches: make(chan []Record, firstBatches)}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(firstMaxPending),
		jetstream.WithPublishAsyncErrHandler(w.refused))
	if err != nil {
		return nil, fmt.Errorf("jobstatus: the first records' JetStream context: %w", err)
	}
	w.js = js
	return w, nil
}

// Add queues rec, a job's first record (FirstRecord), for Run to write. It
// never blocks: a full buffer drops rec (status is advisory). It is safe
// for concurrent use.
func (w *FirstWriter) Add(rec Record) {
	select {
	case w.singles <- rec:
	default:
		w.dropped(1)
	}
}

// AddBatch queues the first records of a batch's stored jobs, for Run to
// write together (FirstMsgs), or drops them all when the buffer is full.
// It never blocks, and is safe for concurrent use; recs is the
// FirstWriter's from then on.
func (w *FirstWriter) AddBatch(recs []Record) {
	select {
	case w.batches <- recs:
	default:
		w.dropped(len(recs))
	}
}

// Run writes the queued records until ctx ends, then publishes whatever
// is still queued — a whole batch's as much as a single's — and returns
// nil. Stop it after the doors that call Add and AddBatch stopped, so
// that the records of their last answers are written. Run does not wait
// for the server's acknowledgements: the connection's drain
// (nats.Conn.Drain) sends the last publishes.
func (w *FirstWriter) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case rec := <-w.singles:
					w.one(rec)
				case recs := <-w.batches:
					w.batch(recs)
				default:
					return nil
				}
			}
		case rec := <-w.singles:
			w.one(rec)
		case recs := <-w.batches:
			w.batch(recs)
		}
	}
}

// one publishes a record that came alone.
func (w *FirstWriter) one(rec Record) {
	m, err := CreateMsg(rec)
	if err != nil {
		w.dropped(1)
		w.log.Debug("writing a job status record", "job", rec.ID, "err", err)
		return
	}
	w.publish(m)
}

// batch publishes a batch's records.
func (w *FirstWriter) batch(recs []Record) {
	msgs, err := FirstMsgs(recs)
	if err != nil {
		w.dropped(len(recs))
		w.log.Debug("writing a batch's job status records", "jobs", len(recs), "err", err)
		return
	}
	for _, m := range msgs {
		w.publish(m)
	}
}

// publish sends m without waiting for the server's answer; a refusal
// comes to refused.
func (w *FirstWriter) publish(m *nats.Msg) {
	if _, err := w.js.PublishMsgAsync(m); err != nil {
		w.dropped(RecordsIn(m))
		w.log.Debug("writing job status records", "subject", m.Subject, "err", err)
	}
}

// refused handles a publish the server did not store (the JetStream
// context's asynchronous error handler).
func (w *FirstWriter) refused(_ jetstream.JetStream, m *nats.Msg, err error) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence && !IsGroup(m) {
		return // the worker's record came first
	}
	w.dropped(RecordsIn(m))
	w.log.Debug("a job status record was not stored", "subject", m.Subject, "err", err)
}
