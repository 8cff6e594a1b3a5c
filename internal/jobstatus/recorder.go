package jobstatus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// DefaultBuffer is a Recorder's buffer when NewRecorder is given 0 or less.
const DefaultBuffer = 4096

const (
	// maxBatch bounds the updates Run takes from the buffer at once.
	maxBatch = 256
	// writers bounds the records of one batch written at once.
	writers = 16
	// writeTimeout bounds one batch's writes, flushTimeout Run's final
	// flush after its context ended.
	writeTimeout = 5 * time.Second
	flushTimeout = 5 * time.Second
)

// Recorder follows the jobs of queue.Workers into their records: Observe is
// a WorkerConfig.Observe, and Run writes what it observed.
//
// Observe never blocks a worker: it puts the update in a bounded buffer, and
// when the buffer is full it drops the update and counts it (Dropped).
// Status is advisory — the job itself is safe in JetStream whatever its
// record says — so a missed step is better than a slow worker; the next
// step of the job writes a whole record again.
//
// # Order
//
// Updates of one job never go backwards. Within the process, Run takes the
// buffer in order, in batches: a batch holds at most one write per job (its
// updates merged in order), its writes go out in parallel, and the next
// batch starts when they are done — so a job's writes are in order while
// different jobs' are concurrent. Across processes (a job handed back by a
// stopping worker and run by another) Store.Advance refuses an update that
// is behind the stored record, under a revision check.
//
// # Writes
//
// A job that succeeds or dies on its first try costs its record one write
// here, without a read: its outcome is put over whatever is there
// (Store.Put) — for an admitted job, nothing: the admitter writes no
// record of it, and the job's READY message is its status until this
// write, which Outcome makes before the job's ack. A retried job's updates are merged into the stored record
// (Store.Advance: a read and a conditional write), so that a late report
// of an earlier try cannot undo a later one. With SetRecordRunning(false)
// Started events write nothing; a backlog job's start is written by
// StartGate, before its handler runs, because that write is what a cancel
// races.
//
// Which events write what:
//
//	Started       running, attempts, started_at (a backlog job's is
//	              written by StartGate instead, when it is the gate)
//	Succeeded     succeeded, finished_at
//	Retrying      retrying, last_error, not_before = the next try
//	DeadLettered  dead (expired for reason queue.ReasonExpired), last_error
//	              (the reason and the error), finished_at
//	Released      nothing: the record stays queued until the job starts,
//	              which is at once for a released job
//	HandedBack    nothing: the job stays running until another worker
//	              starts it again
//
// Each also carries the job's queue and enqueue time, so a record missing
// its first write is still complete.
type Recorder struct {
	store   *Store
	log     *slog.Logger
	updates chan Record
	dropped atomic.Uint64
	running atomic.Bool
	gating  atomic.Bool // StartGate wrote the backlog jobs' starts
	// settling: Outcome wrote the READY jobs' outcomes before their acks.
	settling atomic.Bool
	quiet    atomic.Bool // Started events write nothing (SetRecordRunning)
}

// SetRecordRunning says whether Started events write a running record (on,
// as NewRecorder makes it). Off, a job's record goes from admitted
// straight to its outcome — two writes a job, the admitter's and this
// one's — and says admitted while the job runs; a backlog job's start is
// still written by StartGate, which a cancel needs.
func (r *Recorder) SetRecordRunning(on bool) { r.quiet.Store(!on) }

// NewRecorder returns a Recorder that writes to store, buffering up to
// buffer updates (0 or less: DefaultBuffer) and logging failed writes to
// logger (nil: slog.Default()). Nothing is written until Run.
func NewRecorder(store *Store, logger *slog.Logger, buffer int) *Recorder {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Recorder{store: store, log: logger, updates: make(chan Record, buffer)}
}

// Observe records a worker's event. It never blocks, and is safe for
// concurrent use; use it as worker.WorkerConfig.Observe.
func (r *Recorder) Observe(e worker.Event) {
	if e.Kind == worker.Started && r.quiet.Load() {
		return // not asked for; a backlog job's start is StartGate's
	}
	if e.Kind == worker.Started && r.gating.Load() && e.Stream == queue.StreamName(e.Queue, queue.Backlog) {
		return // StartGate wrote it, synchronously
	}
	if (e.Kind == worker.Succeeded || e.Kind == worker.DeadLettered) && r.settling.Load() && e.Stream == queue.StreamName(e.Queue, queue.Ready) {
		return // Outcome wrote it (or queued it), before the ack
	}
	rec, ok := update(e, time.Now())
	if !ok {
		return
	}
	select {
	case r.updates <- rec:
	default:
		r.dropped.Add(1)
	}
}

// StartGate is a worker.WorkerConfig.StartGate (Store.StartGate) for the
// workers this Recorder observes: the backlog jobs' starts it writes are
// then not written a second time from their Started events.
func (r *Recorder) StartGate(ctx context.Context, e worker.Event) error {
	r.gating.Store(true)
	return r.store.StartGate(ctx, e)
}

// Outcome is a worker.WorkerConfig.Outcome for the workers this Recorder
// observes: it writes a READY job's outcome and returns when JetStream
// has stored it, before the worker acks the job. An admitted job has no
// record until then — its READY message is its status (Locator) — so
// this write is not dropped when the buffer is full, as an update may be:
// a reader would find the job nowhere. A write that fails is queued for
// Run like any update, and the error returned. The outcomes it writes are
// not written again from their events.
func (r *Recorder) Outcome(ctx context.Context, e worker.Event) error {
	r.settling.Store(true)
	rec, ok := update(e, time.Now())
	if !ok {
		return nil
	}
	err := r.store.record(ctx, rec)
	if err != nil {
		select {
		case r.updates <- rec:
		default:
			r.dropped.Add(1)
		}
	}
	return err
}

// Dropped is the number of updates that never reached the store: the buffer
// was full, a write failed, or Run's final flush ran out of time.
func (r *Recorder) Dropped() uint64 { return r.dropped.Load() }

// Run writes the observed updates until ctx ends, then flushes the buffer
// for up to 5s and returns nil. Stop it after the workers it observes have
// returned from Run, so that their last steps are written. Only one Run at a
// time: a second one returns an error at once.
func (r *Recorder) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("jobstatus: Recorder.Run is already running")
	}
	defer r.running.Store(false)
	for {
		select {
		case <-ctx.Done():
			r.flush(ctx)
			return nil
		case rec := <-r.updates:
			// Writes outlive ctx by up to writeTimeout, so that a batch in
			// hand when the recorder stops is written, not abandoned.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
			r.write(wctx, r.collect(rec))
			cancel()
		}
	}
}

// flush writes what is in the buffer, for up to flushTimeout, and counts
// what it had no time for as dropped.
func (r *Recorder) flush(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	for fctx.Err() == nil {
		select {
		case rec := <-r.updates:
			r.write(fctx, r.collect(rec))
		default:
			return
		}
	}
	for range cap(r.updates) {
		select {
		case <-r.updates:
			r.dropped.Add(1)
		default:
			return
		}
	}
}

// collect takes first and whatever else the buffer holds, up to maxBatch.
func (r *Recorder) collect(first Record) []Record {
	batch := []Record{first}
	for len(batch) < maxBatch {
		select {
		case rec := <-r.updates:
			batch = append(batch, rec)
		default:
			return batch
		}
	}
	return batch
}

// write stores a batch: its updates of one job merged in order into one
// write, the writes of different jobs in parallel. It returns when every
// write is done.
func (r *Recorder) write(ctx context.Context, batch []Record) {
	type pending struct {
		rec     Record
		updates int
	}
	var (
		jobs  []pending
		index = make(map[string]int, len(batch))
	)
	for _, rec := range batch {
		i, ok := index[rec.ID]
		if !ok {
			index[rec.ID] = len(jobs)
			jobs = append(jobs, pending{rec: rec, updates: 1})
			continue
		}
		if merged, ok := merge(jobs[i].rec, rec); ok {
			jobs[i].rec = merged
		}
		jobs[i].updates++
	}
	var (
		wg     sync.WaitGroup
		sem    = make(chan struct{}, writers)
		mu     sync.Mutex
		failed int
		first  error
	)
	put := func(p pending) {
		defer func() { <-sem }()
		if err := r.store.record(ctx, p.rec); err != nil {
			r.dropped.Add(uint64(p.updates))
			mu.Lock()
			failed++
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}
	// The last write runs on this goroutine: a batch of one, the most
	// common under a steady flow of jobs, starts none (a goroutine per
	// write grew its stack anew for the JSON and the put each time).
	for i, p := range jobs {
		sem <- struct{}{}
		if i == len(jobs)-1 {
			put(p)
			break
		}
		wg.Go(func() { put(p) })
	}
	wg.Wait()
	if failed > 0 {
		r.log.Warn("job status writes failed; the jobs are not affected, their records may lag",
			"failed", failed, "jobs", len(jobs), "error", first)
	}
}

// record stores update: a job's outcome after one try over whatever is
// there, without reading it first (Put) — nothing can be further along,
// and a cancelled job never got to try (StartGate) — and anything else
// merged into the stored record (Advance), which never goes backwards.
// An outcome with no try (dead-lettered from the backlog before any
// start: expired, or over max_age) is merged too: its job may have been
// cancelled, and a cancelled record stays cancelled.
func (s *Store) record(ctx context.Context, update Record) error {
	if update.State.Final() && update.Attempts == 1 {
		return s.Put(ctx, update)
	}
	_, _, err := s.Advance(ctx, update)
	return err
}

// update is the record update an event stands for, at now; false when the
// event changes no record.
func update(e worker.Event, now time.Time) (Record, bool) {
	if e.Job == nil { // a message that was not a job: it has no record
		return Record{}, false
	}
	rec := Record{
		ID:         e.Job.ID,
		Queue:      e.Job.Queue,
		Attempts:   e.Attempt,
		EnqueuedAt: e.Job.EnqueuedAt,
		NotBefore:  e.Job.NotBefore,
		UpdatedAt:  now,
		Submitter:  e.Job.Header.Get(spillway.HeaderSubmitter),
	}
	if rec.Queue == "" {
		rec.Queue = e.Queue
	}
	var began time.Time // the try's start, for events after a try
	if e.Took > 0 {
		began = now.Add(-e.Took)
	}
	switch e.Kind {
	case worker.Started:
		rec.State, rec.StartedAt = spillway.StateRunning, now
	case worker.Succeeded:
		rec.State, rec.StartedAt, rec.FinishedAt = spillway.StateSucceeded, began, now
	case worker.Retrying:
		rec.State, rec.StartedAt, rec.NotBefore = spillway.StateRetrying, began, now.Add(e.Delay)
		if e.Err != nil {
			rec.LastError = queue.OneLine(e.Err.Error(), MaxErrorLen)
		}
	case worker.DeadLettered:
		rec.State, rec.StartedAt, rec.FinishedAt = spillway.StateDead, began, now
		if e.Reason == queue.ReasonExpired {
			rec.State = spillway.StateExpired
		}
		switch {
		case e.Err != nil && e.Reason != "":
			rec.LastError = queue.OneLine(e.Reason+": "+e.Err.Error(), MaxErrorLen)
		case e.Err != nil:
			rec.LastError = queue.OneLine(e.Err.Error(), MaxErrorLen)
		default:
			rec.LastError = queue.OneLine(e.Reason, MaxErrorLen)
		}
	default: // Released, HandedBack
		return Record{}, false
	}
	return rec, true
}
