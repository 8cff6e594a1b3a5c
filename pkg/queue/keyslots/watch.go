package keyslots

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/internal/kvwatch"
)

// Watch follows the holders of a queue's key slots as the bucket holds
// them — every worker's, a dead one's until another worker removes it —
// so that a reader (the drain's leader) knows which keys are at their max
// without reading the bucket. Run follows the entries; Holders reads what
// it knows; Changed and TakeChanged tell which entries changed.
// Safe for concurrent use; the zero value is not usable: use NewWatch.
//
// Its traffic is one message per change of an entry of the queue: a
// slot taken, given back, or its holder's beat (every ack wait/3 while a
// bounded job runs).
type Watch struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[string]watched // entry key (EntryKey) → its holders
	dirty   map[string]struct{}
	changed chan struct{}
}

type watched struct {
	jobs []string // the holders' job ids
	at   int64    // unix ns, by this process's clock: when it last changed
}

// NewWatch returns a Watch that knows no holder.
func NewWatch() *Watch {
	return &Watch{now: time.Now, entries: map[string]watched{}, dirty: map[string]struct{}{}, changed: make(chan struct{}, 1)}
}

// Holders are the jobs holding a slot of entry key ek (the caller must not
// change the slice) and when this process last saw the entry change (by
// its own clock; zero when it holds none).
func (w *Watch) Holders(ek string) (jobs []string, changed time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[ek]
	if !ok {
		return nil, time.Time{}
	}
	return e.jobs, time.Unix(0, e.at)
}

// Changed is told when an entry changes. Only one reader should wait on
// it: TakeChanged says which entries changed.
func (w *Watch) Changed() <-chan struct{} { return w.changed }

// TakeChanged returns the entry keys that changed since the last call.
func (w *Watch) TakeChanged() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.dirty) == 0 {
		return nil
	}
	out := make([]string, 0, len(w.dirty))
	for ek := range w.dirty {
		out = append(out, ek)
	}
	clear(w.dirty)
	return out
}

// set records entry ek's holders (none: the entry is gone).
func (w *Watch) set(ek string, jobs []string) {
	w.mu.Lock()
	if len(jobs) == 0 {
		delete(w.entries, ek)
	} else {
		w.entries[ek] = watched{jobs: jobs, at: w.now().UnixNano()}
	}
	w.dirty[ek] = struct{}{}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Run follows queue q's entries in kv (OpenBucket) until ctx ends,
// watching again after a failure (the holders known meanwhile stand). It
// closes known once the entries at the start were delivered (nil: none
// told).
func (w *Watch) Run(ctx context.Context, kv jetstream.KeyValue, q string, log *slog.Logger, known chan<- struct{}) {
	kvwatch.Run(ctx, kv, q+".>", known, log, "the queue's key slots", func(e jetstream.KeyValueEntry) {
		if !strings.HasPrefix(e.Key(), q+".") {
			return
		}
		var jobs []string
		if e.Operation() == jetstream.KeyValuePut {
			var v Entry
			if json.Unmarshal(e.Value(), &v) != nil {
				return // not ours to read; take rewrites it
			}
			for _, hd := range v.Holders {
				jobs = append(jobs, hd.Job)
			}
		}
		w.set(e.Key(), jobs)
	})
}
