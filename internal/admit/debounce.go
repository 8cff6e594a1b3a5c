package admit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
)

// Debounce (docs/design.md#debounce). A job submitted with
// Spillway-Debounce: d is a scheduled job due d after its arrival (it
// always waits in the backlog). Once it is stored, the admitter makes it
// the newest job of its group — its queue, its submitter and its debounce
// key — in the KV bucket DebounceBucket, and supersedes the job that was
// the newest before it: that job's claim and record say superseded (it
// never starts: the start gate refuses it) and its backlog message is
// deleted. The steps come in this order so that nothing is superseded for
// a job the backlog refused, and a job whose start came first runs.
//
// Two admitters storing jobs of one group at once meet at the group's
// entry, which is written with compare-and-set: the job stored later in
// the backlog (the higher stream sequence) is the newest whichever
// admitter writes last, and the other is superseded.

// DebounceBucket is the JetStream KV bucket of the newest debounced job
// of each group.
const DebounceBucket = "spillway-debounce"

// Superseded is a debounced job that a newer job of its group replaces:
// what the group's entry knows of it, for its status record.
type Superseded struct {
	ID, Queue string
	// Submitter is the job's submitter (a group is one submitter's).
	Submitter string
	// By is the newer job's id.
	By         string
	BacklogSeq uint64
	EnqueuedAt time.Time
	NotBefore  time.Time
}

// Superseder ends a superseded job's status (internal/jobstatus): it
// reports false when the job cannot be superseded any more (it started,
// or ended otherwise), and then the admitter leaves the job alone.
type Superseder interface {
	Supersede(ctx context.Context, s Superseded) (bool, error)
}

// Debouncer keeps the newest debounced job of each group. Safe for
// concurrent use.
type Debouncer struct {
	kv     jetstream.KeyValue
	status Superseder
}

// OpenDebounce creates or updates the bucket: an entry lives ttl after
// its last write (it must outlive the longest wait of a debounced job, a
// queue's backlog.max_delay), replicated replicas times (0: 1).
func OpenDebounce(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, status Superseder) (*Debouncer, error) {
	if status == nil {
		return nil, errors.New("admit: OpenDebounce needs the job status store")
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      DebounceBucket,
		Description: "Spillway: the newest debounced job of each queue, submitter and debounce key",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("admit: debounce bucket: %w", err)
	}
	return &Debouncer{kv: kv, status: status}, nil
}

// debounceEntry is a group's newest job.
type debounceEntry struct {
	ID         string    `json:"id"`
	Seq        uint64    `json:"seq"` // its backlog sequence
	EnqueuedAt time.Time `json:"enqueued_at"`
	NotBefore  time.Time `json:"not_before"`
}

// debounceGroup is the KV key of the group of a debounced request r of
// queue q whose limit key is jobKey: the queue and a token of its
// submitter and debounce key (Spillway-Debounce-Key, or the limit key),
// so one caller's key never reaches another caller's jobs.
func debounceGroup(q string, r *Request, jobKey string) string {
	k := r.DebounceKey
	if k == "" {
		k = jobKey
	}
	return q + "." + queue.KeyToken(r.Caller+"\x00"+k)
}

// register makes e the newest job of group, unless the entry names a job
// stored after it and not yet due at now. It returns the job that is
// superseded (zero: none) and the job superseding it.
func (d *Debouncer) register(ctx context.Context, group string, e debounceEntry, now time.Time) (old, by debounceEntry, err error) {
	data, err := json.Marshal(e)
	if err != nil {
		return old, by, err
	}
	for range 16 {
		cur, err := d.kv.Get(ctx, group)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := d.kv.Create(ctx, group, data); errors.Is(err, jetstream.ErrKeyExists) {
				continue // another admitter's job came first: compare with it
			} else if err != nil {
				return old, by, fmt.Errorf("admit: debounce group %s: %w", group, err)
			}
			return debounceEntry{}, e, nil
		}
		if err != nil {
			return old, by, fmt.Errorf("admit: debounce group %s: %w", group, err)
		}
		var prev debounceEntry
		if err := json.Unmarshal(cur.Value(), &prev); err != nil {
			prev = debounceEntry{} // replaced below; its job cannot be named
		}
		switch {
		case prev.ID == e.ID:
			return debounceEntry{}, e, nil // this job again (an idempotent retry)
		case prev.Seq > e.Seq && prev.NotBefore.After(now):
			// A job stored after this one, by another admitter at the
			// same moment, is the newest already. (One that is due
			// already is no such job: an entry older than a backlog that
			// was deleted and made again, whose sequences restarted.)
			return e, prev, nil
		}
		_, err = d.kv.Update(ctx, group, data, cur.Revision())
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another admitter wrote meanwhile
		}
		if err != nil {
			return old, by, fmt.Errorf("admit: debounce group %s: %w", group, err)
		}
		return prev, e, nil
	}
	return old, by, fmt.Errorf("admit: debounce group %s: the entry keeps changing", group)
}

// debounceTimeout bounds the steps of a debounce after the job is
// stored; they go on if the submitter leaves.
const debounceTimeout = 5 * time.Second

// debounce makes the stored job of p (a debounced one, in the backlog at
// stored) its group's newest, and supersedes the job that was. A failure
// leaves both jobs to run (logged): the job is stored and answered
// queued either way.
func (a *Admitter) debounce(ctx context.Context, p *placing, stored queue.Stored) {
	d := a.o.Debounce
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), debounceTimeout)
	defer cancel()
	j := p.j
	group := debounceGroup(p.q.Name, p.r, p.jobKey)
	old, by, err := d.register(ctx, group, debounceEntry{ID: j.ID, Seq: stored.Sequence, EnqueuedAt: j.EnqueuedAt, NotBefore: j.NotBefore}, a.o.Now())
	if err != nil {
		a.o.Logger.Warn("admit: a debounced job was not made its group's newest; an older job of its group may run too",
			"queue", p.q.Name, "job", j.ID, "err", err)
		return
	}
	if old.ID == "" {
		return
	}
	ok, err := d.status.Supersede(ctx, Superseded{ID: old.ID, Queue: p.q.Name, Submitter: p.r.Caller, By: by.ID,
		BacklogSeq: old.Seq, EnqueuedAt: old.EnqueuedAt, NotBefore: old.NotBefore})
	if err != nil {
		a.o.Logger.Warn("admit: a debounced job was not superseded; it may run too",
			"queue", p.q.Name, "job", old.ID, "newer", by.ID, "err", err)
		return
	}
	if !ok {
		return // it started already (it runs), or ended otherwise
	}
	a.observe(Event{Kind: JobSuperseded, Queue: p.q.Name})
	if err := admin.CancelBacklogJob(ctx, a.o.JS, p.q.Name, old.Seq, old.ID); err != nil {
		a.o.Logger.Warn("admit: a superseded job's backlog message was not deleted; the worker granted it deletes it and runs nothing",
			"queue", p.q.Name, "job", old.ID, "err", err)
	}
}
