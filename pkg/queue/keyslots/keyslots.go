package keyslots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// Bucket is the key-value bucket of every queue's key slots.
const Bucket = "spillway-slots"

// bucketMaxAge drops an entry nobody wrote for a day: the holders of a
// key whose workers died and whose jobs never came again. A live entry
// is written every lease/3.
const bucketMaxAge = 24 * time.Hour

// casTries bounds the compare-and-set attempts of one update: each one
// that fails lost to another worker's update of the same key.
const casTries = 20

// requestTimeout bounds one key-value request.
const requestTimeout = 5 * time.Second

// ErrContended is returned when an update lost casTries races in a row.
var ErrContended = errors.New("keyslots: the key's entry kept changing under the update")

// OpenBucket creates or opens Bucket with replicas replicas (1 to 5; 0
// means 1).
func OpenBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if replicas == 0 {
		replicas = 1
	}
	if err := queue.ValidateReplicas(replicas); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "Spillway: the jobs running under each key's concurrency bound (docs/design.md#per-key-concurrency)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		TTL:         bucketMaxAge,
	})
	if err != nil {
		return nil, fmt.Errorf("keyslots: bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Holder is a job holding a slot of a key.
type Holder struct {
	Job    string `json:"job"`
	Worker string `json:"worker"`
	Beat   uint64 `json:"beat"`
}

// Entry is the value of a key's entry: the jobs holding its slots.
type Entry struct {
	Holders []Holder `json:"holders"`
}

// EntryKey is the key of the entry of concurrency entry name's key token
// in queue q.
func EntryKey(q, name, token string) string { return q + "." + name + "." + token }

// Slots takes and gives back a queue's key slots for the jobs of one
// worker. It is safe for concurrent use.
type Slots struct {
	kv     jetstream.KeyValue
	queue  string
	worker string
	lease  time.Duration

	mu sync.Mutex
	// seen is when this process first saw each holder at its beat, by
	// entry key and job: a holder seen unchanged for a lease is dead.
	// What was not seen again for two leases is swept (sweptAt).
	seen    map[string]map[string]seenBeat
	sweptAt time.Time
	// freed is closed, and replaced, when this process gives a slot back,
	// so that its own waiters look at once.
	freed chan struct{}
	// waiting serializes this process's waiters of one key: one of them
	// looks at the entry at a time.
	waiting map[string]*waiters
}

type seenBeat struct {
	beat uint64
	at   time.Time
}

// New returns the slots of queue q in kv for one worker, whose holders
// are dead once unchanged for lease.
func New(kv jetstream.KeyValue, q string, lease time.Duration) *Slots {
	return &Slots{
		kv: kv, queue: q, worker: uuid.NewString(), lease: lease,
		seen: map[string]map[string]seenBeat{}, freed: make(chan struct{}), waiting: map[string]*waiters{},
	}
}

// Hold is the slots one job holds, one per bound it has.
type Hold struct {
	s    *Slots
	job  string
	keys []string // entry keys
}

// TryAcquire takes a slot of every bound in keys for job, or none: it
// reports false when a key is at its max (the slots it took are given
// back).
func (s *Slots) TryAcquire(ctx context.Context, job string, keys []queue.ConcurrencyKey) (*Hold, bool, error) {
	h := &Hold{s: s, job: job}
	for _, k := range keys {
		ek := EntryKey(s.queue, k.Name, k.Token)
		ok, err := s.take(ctx, ek, job, k.Max)
		if err != nil || !ok {
			// A slot not given back is no one's once its holder's beat
			// stops: others take it over an ack wait later.
			_ = h.Release(context.WithoutCancel(ctx))
			return nil, false, err
		}
		h.keys = append(h.keys, ek)
	}
	return h, true, nil
}

// Acquire waits until job holds a slot of every bound in keys, looking
// again when this process gives a slot back and at least every 100 ms.
// This process's waiters of one key take turns: only the first looks at
// the entry, so that the waiters of a key do not each read it. It returns
// ctx's error if ctx ends first. onWait, if not nil, is called once, when
// the first look finds a key at its max.
func (s *Slots) Acquire(ctx context.Context, job string, keys []queue.ConcurrencyKey, onWait func()) (*Hold, error) {
	if h, ok, _ := s.TryAcquire(ctx, job, keys); ok || ctx.Err() != nil { // an error: looked at again below
		return h, ctx.Err()
	}
	if onWait != nil {
		onWait()
	}
	done, err := s.turn(ctx, keys)
	if err != nil {
		return nil, err
	}
	defer done()
	backoff := 10 * time.Millisecond
	for {
		s.mu.Lock()
		freed := s.freed
		s.mu.Unlock()
		h, ok, err := s.TryAcquire(ctx, job, keys)
		if ok {
			return h, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			backoff = 100 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		backoff = min(backoff*2, 100*time.Millisecond)
	}
}

// turn waits for this waiter's turn at keys' first bound (or for ctx) and
// returns the function that ends it.
func (s *Slots) turn(ctx context.Context, keys []queue.ConcurrencyKey) (done func(), err error) {
	ek := EntryKey(s.queue, keys[0].Name, keys[0].Token)
	s.mu.Lock()
	w := s.waiting[ek]
	if w == nil {
		w = &waiters{turn: make(chan struct{}, 1)}
		s.waiting[ek] = w
	}
	w.n++
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.n--; w.n == 0 {
			delete(s.waiting, ek)
		}
	}
	select {
	case w.turn <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	return func() { <-w.turn; leave() }, nil
}

// waiters are this process's waiters of one key: n of them, the one whose
// turn it is holding turn.
type waiters struct {
	turn chan struct{}
	n    int
}

// Renew counts the beat of every slot h holds up, so that other workers
// see its job alive. A slot h no longer holds (another worker took it
// over after this one stopped beating for a lease) is not taken again.
func (h *Hold) Renew(ctx context.Context) error {
	var errs []error
	for _, ek := range h.keys {
		if err := h.s.update(ctx, ek, func(e *Entry) bool {
			for i := range e.Holders {
				if e.Holders[i].Job == h.job && e.Holders[i].Worker == h.s.worker {
					e.Holders[i].Beat++
					return true
				}
			}
			return false
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Release gives back every slot h holds; a nil h holds none. A slot it
// fails to give back is taken by another worker once its beat has not
// changed for a lease.
func (h *Hold) Release(ctx context.Context) error {
	if h == nil {
		return nil
	}
	var errs []error
	for _, ek := range h.keys {
		if err := h.s.update(ctx, ek, func(e *Entry) bool {
			n := len(e.Holders)
			e.Holders = removeJob(e.Holders, h.job, h.s.worker)
			return len(e.Holders) != n
		}); err != nil {
			errs = append(errs, err)
		}
	}
	h.keys = nil
	h.s.mu.Lock()
	close(h.s.freed)
	h.s.freed = make(chan struct{})
	h.s.mu.Unlock()
	return errors.Join(errs...)
}

// take adds job to the holders of entry key ek if fewer than most live
// holders are there; holders past their lease, and job's own earlier
// holding, are removed in the same update.
func (s *Slots) take(ctx context.Context, ek, job string, most int) (bool, error) {
	taken := false
	err := s.update(ctx, ek, func(e *Entry) bool {
		taken = false
		now := time.Now()
		live := e.Holders[:0:0]
		for _, hd := range e.Holders {
			if hd.Job == job || s.dead(ek, hd, now) {
				continue
			}
			live = append(live, hd)
		}
		changed := len(live) != len(e.Holders)
		e.Holders = live
		if len(live) >= most {
			return changed
		}
		e.Holders = append(e.Holders, Holder{Job: job, Worker: s.worker})
		taken = true
		return true
	})
	return taken && err == nil, err
}

// dead reports whether holder hd of entry key ek has kept its beat for a
// whole lease, as this process saw it; the first sight of a beat starts
// its clock. Holders of this process are never dead: it releases them.
func (s *Slots) dead(ek string, hd Holder, now time.Time) bool {
	if hd.Worker == s.worker {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	m := s.seen[ek]
	if m == nil {
		m = map[string]seenBeat{}
		s.seen[ek] = m
	}
	id := hd.Worker + "/" + hd.Job
	sb, ok := m[id]
	if !ok || sb.beat != hd.Beat {
		m[id] = seenBeat{beat: hd.Beat, at: now}
		return false
	}
	return now.Sub(sb.at) >= s.lease
}

// sweepLocked drops, at most once a lease, the sightings older than two
// leases: a live holder's beat changes every lease/3, and a dead one seen
// since is removed from its entry, so such a sighting is of an entry this
// process no longer looks at. Were it looked at again, its holders' clocks
// start anew.
func (s *Slots) sweepLocked(now time.Time) {
	if now.Sub(s.sweptAt) < s.lease {
		return
	}
	s.sweptAt = now
	for ek, m := range s.seen {
		for id, sb := range m {
			if now.Sub(sb.at) > 2*s.lease {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(s.seen, ek)
		}
	}
}

// forget drops what this process saw of the holders of ek that are no
// longer there.
func (s *Slots) forget(ek string, e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.seen[ek]
	if m == nil {
		return
	}
	if len(e.Holders) == 0 {
		delete(s.seen, ek)
		return
	}
	keep := make(map[string]bool, len(e.Holders))
	for _, hd := range e.Holders {
		keep[hd.Worker+"/"+hd.Job] = true
	}
	for id := range m {
		if !keep[id] {
			delete(m, id)
		}
	}
}

// update reads entry key ek, lets change edit it (it reports whether it
// did) and writes it back at the revision read — deleting it when no
// holder is left — until no other update came between.
func (s *Slots) update(ctx context.Context, ek string, change func(*Entry) bool) error {
	for try := 0; try < casTries; try++ {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := s.updateOnce(rctx, ek, change)
		cancel()
		if !errors.Is(err, errRaced) {
			return err
		}
	}
	return fmt.Errorf("%w: %s", ErrContended, ek)
}

var errRaced = errors.New("raced")

func (s *Slots) updateOnce(ctx context.Context, ek string, change func(*Entry) bool) error {
	var (
		e   Entry
		rev uint64
	)
	kve, err := s.kv.Get(ctx, ek)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("keyslots: reading %s: %w", ek, err)
	default:
		rev = kve.Revision()
		if err := json.Unmarshal(kve.Value(), &e); err != nil {
			// Not ours to read: start it again rather than never run its key.
			e = Entry{}
		}
	}
	if !change(&e) {
		s.forget(ek, &e)
		return nil
	}
	s.forget(ek, &e)
	if len(e.Holders) == 0 {
		if rev == 0 {
			return nil
		}
		err = s.kv.Delete(ctx, ek, jetstream.LastRevision(rev))
		return raced(err, ek)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("keyslots: %s: %w", ek, err)
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, ek, b)
	} else {
		_, err = s.kv.Update(ctx, ek, b, rev)
	}
	return raced(err, ek)
}

// raced turns a lost compare-and-set into errRaced.
func raced(err error, ek string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return errRaced
	}
	return fmt.Errorf("keyslots: writing %s: %w", ek, err)
}

func removeJob(hs []Holder, job, worker string) []Holder {
	out := hs[:0]
	for _, hd := range hs {
		if hd.Job != job || hd.Worker != worker {
			out = append(out, hd)
		}
	}
	return out
}

// Running is how many jobs hold a slot of each key of queue q, by
// concurrency entry name and key token, as the bucket holds them now
// (holders of dead workers count until another worker removes them).
func Running(ctx context.Context, kv jetstream.KeyValue, q string) (map[string]map[string]int, error) {
	lister, err := kv.ListKeysFiltered(ctx, q+".>")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("keyslots: listing %s: %w", q, err)
	}
	out := map[string]map[string]int{}
	for k := range lister.Keys() {
		var name, token string
		rest := k[len(q)+1:]
		for i := len(rest) - 1; i >= 0; i-- {
			if rest[i] == '.' {
				name, token = rest[:i], rest[i+1:]
				break
			}
		}
		if name == "" {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // gone since the listing
		}
		var v Entry
		if json.Unmarshal(e.Value(), &v) != nil || len(v.Holders) == 0 {
			continue
		}
		if out[name] == nil {
			out[name] = map[string]int{}
		}
		out[name][token] = len(v.Holders)
	}
	return out, nil
}
