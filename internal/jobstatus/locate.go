package jobstatus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Locator answers where a job is, for a reader given its id alone
// (GET /v1/jobs/{id}, spillway.job.<id>, a cancel). An admitted job has no
// record until its outcome — the admitter stores the job in READY and
// nothing else — so until then the job's READY message is its status:
//
//  1. the job's record (and its claim), as Store.Get reads it;
//  2. if there is none, the job in READY of each queue whose tag the id
//     carries (queue.JobIDQueueTag; usually one queue): found, it is
//     admitted, with its queue, enqueue time, not-before and submitter;
//  3. if READY does not hold it either, the record once more: the job may
//     have finished between the two reads, and a worker writes a READY
//     job's outcome before it acks the job (Recorder.Settle), so a job
//     that left READY has its record by then.
//
// The zero Locator is not usable; NewLocator makes one. It is safe for
// concurrent use.
type Locator struct {
	store  *Store
	js     jetstream.JetStream
	queues func() []string
}

// NewLocator reads records from store and READY jobs through js (nil:
// records only), in the queues that queues returns when it is asked — the
// admitter's live set, which a reload changes.
func NewLocator(store *Store, js jetstream.JetStream, queues func() []string) *Locator {
	return &Locator{store: store, js: js, queues: queues}
}

// Get is job id's status: its record, or an admitted record made from its
// READY message (see Locator). The errors are Store.Get's, or a READY
// read's that failed.
func (l *Locator) Get(ctx context.Context, id string) (Record, error) {
	rec, err := l.store.Get(ctx, id)
	if !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	rec, found, err := l.inReady(ctx, id)
	switch {
	case err != nil:
		return Record{}, err
	case found:
		return rec, nil
	}
	return l.store.Get(ctx, id)
}

// CancelAs is Store.CancelAs over the job's status as Get finds it: a job
// found in READY is admitted, a *NotCancellableError (or ErrNotFound when
// may does not accept it, as for a record).
func (l *Locator) CancelAs(ctx context.Context, id, by string, may func(Record) bool) (Record, error) {
	out, err := l.store.CancelAs(ctx, id, by, may)
	if !errors.Is(err, ErrNotFound) {
		return out, err
	}
	rec, found, rerr := l.inReady(ctx, id)
	switch {
	case rerr != nil:
		return Record{}, rerr
	case !found:
		return l.store.CancelAs(ctx, id, by, may)
	case may != nil && !may(rec):
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return Record{}, &NotCancellableError{Record: rec}
}

// inReady looks for job id in READY of every queue whose tag it carries.
func (l *Locator) inReady(ctx context.Context, id string) (Record, bool, error) {
	if l.js == nil || l.queues == nil {
		return Record{}, false, nil
	}
	tag, ok := queue.JobIDQueueTag(id)
	if !ok {
		return Record{}, false, nil
	}
	for _, q := range l.queues() {
		if queue.QueueTag(q) != tag {
			continue
		}
		m, err := queue.FindReady(ctx, l.js, q, id)
		if err != nil {
			return Record{}, false, fmt.Errorf("jobstatus: %w", err)
		}
		if m == nil {
			continue
		}
		return readyRecord(id, q, m), true, nil
	}
	return Record{}, false, nil
}

// readyRecord is the status of job id found in READY of queue q as m:
// admitted, as the admitter's record said before it stopped writing one.
// The enqueue time is the job's header, or the message's stored time.
func readyRecord(id, q string, m *jetstream.RawStreamMsg) Record {
	rec := Record{ID: id, Queue: q, State: spillway.StateAdmitted, EnqueuedAt: m.Time,
		Submitter: m.Header.Get(spillway.HeaderSubmitter)}
	if j, err := queue.ParseJob(m.Header, nil); err == nil {
		rec.EnqueuedAt, rec.NotBefore = j.EnqueuedAt, j.NotBefore
	}
	rec.UpdatedAt = rec.EnqueuedAt
	return rec
}
