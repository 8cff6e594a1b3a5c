package overrides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// Bucket is the JetStream KV bucket of the runtime overrides.
const Bucket = "spillway-limits"

// Target is what an override is of: a queue's limit tier (Tier, its
// name) or its per-key concurrency entry (Concurrency, its name); one of
// the two is set.
type Target struct {
	Queue string `json:"queue"`
	// Tier is a limit tier's name, for an override of its parameters.
	Tier string `json:"tier,omitempty"`
	// Concurrency is a concurrency entry's name, for an override of its
	// max (docs/design.md#per-key-concurrency).
	Concurrency string `json:"concurrency,omitempty"`
}

// String names t in messages: queue/tier, or queue/concurrency/name.
func (t Target) String() string {
	if t.Concurrency != "" {
		return t.Queue + "/concurrency/" + t.Concurrency
	}
	return t.Queue + "/" + t.Tier
}

// valid reports whether t names a queue and exactly one of a tier and a
// concurrency entry.
func (t Target) valid() bool {
	return t.Queue != "" && (t.Tier == "") != (t.Concurrency == "")
}

// entryKey is the one place a runtime override's KV key is spelled:
// <queue>.<KeyToken of the tier's name and the pattern> for a tier's,
// <queue>.concurrency.<KeyToken of the entry's name and the pattern> for
// a concurrency entry's. The token is a hash, since a client key may hold
// any byte (and a tier's name a '.'); the raw names and pattern are in
// the Record.
func entryKey(t Target, p Pattern) string {
	if t.Concurrency != "" {
		return t.Queue + ".concurrency." + queue.KeyToken(t.Concurrency+"\n"+p.String())
	}
	return t.Queue + "." + queue.KeyToken(t.Tier+"\n"+p.String())
}

// Record is a runtime override as its KV entry holds it (JSON): a tier's
// with Params, a concurrency entry's with Max.
type Record struct {
	Target
	// Key is the pattern as written ("tenant-a", "tenant-*").
	Key string `json:"key"`
	// Params, for a tier's override.
	Params Params `json:"params,omitzero"`
	// Max, for a concurrency entry's override: how many jobs of one of
	// its keys run at once.
	Max int `json:"max,omitempty"`
	// By is the fingerprint of the admin key that set it; At is when.
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// Open opens the overrides' bucket, creating it if no admitter did yet,
// with replicas copies (0 means 1).
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	replicas, err := pace.KVReplicas(replicas)
	if err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "Spillway: per-key limit and concurrency overrides set through the admin API (docs/design.md#per-key-overrides)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("overrides: bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Put stores r, replacing the override of the same target and pattern.
func Put(ctx context.Context, kv jetstream.KeyValue, r Record) error {
	if !r.valid() {
		return fmt.Errorf("overrides: an override of %+v: want a queue and one of a tier and a concurrency entry", r.Target)
	}
	p, err := ParsePattern(r.Key)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	if _, err := kv.Put(ctx, entryKey(r.Target, p), b); err != nil {
		return fmt.Errorf("overrides: storing an override of %s: %w", r.Target, err)
	}
	return nil
}

// Delete removes the runtime override of pattern p of t. Deleting one
// that does not exist is not an error.
func Delete(ctx context.Context, kv jetstream.KeyValue, t Target, p Pattern) error {
	if err := kv.Delete(ctx, entryKey(t, p)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("overrides: deleting an override of %s: %w", t, err)
	}
	return nil
}

// Get reads the runtime override of pattern p of t; ok is false when
// there is none.
func Get(ctx context.Context, kv jetstream.KeyValue, t Target, p Pattern) (_ Record, ok bool, _ error) {
	e, err := kv.Get(ctx, entryKey(t, p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("overrides: reading an override of %s: %w", t, err)
	}
	r, ok := decode(e.Value())
	return r, ok, nil
}

// decode reads an entry's value; ok is false for one that is not a
// Record of a valid pattern (logged by the caller, never applied).
func decode(b []byte) (Record, bool) {
	var r Record
	if json.Unmarshal(b, &r) != nil || !r.valid() {
		return Record{}, false
	}
	if _, err := ParsePattern(r.Key); err != nil {
		return Record{}, false
	}
	return r, true
}

// Watcher follows the bucket: Records is every runtime override in force,
// and OnChange is called with them after each change. Safe for concurrent
// use.
type Watcher struct {
	kv  jetstream.KeyValue
	log *slog.Logger
	// OnChange, if set before Run, gets every record after the initial
	// values and after each change; calls do not overlap.
	OnChange func([]Record)

	mu      sync.Mutex
	records map[string]Record // by KV key
	loaded  chan struct{}
	once    sync.Once
}

// NewWatcher returns a Watcher of kv (Open's).
func NewWatcher(kv jetstream.KeyValue, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	return &Watcher{kv: kv, log: log, records: map[string]Record{}, loaded: make(chan struct{})}
}

// Loaded is closed once the bucket's values at the start are delivered
// (and OnChange called with them).
func (w *Watcher) Loaded() <-chan struct{} { return w.loaded }

// Records is every runtime override known now.
func (w *Watcher) Records() []Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Record, 0, len(w.records))
	for _, r := range w.records {
		out = append(out, r)
	}
	return out
}

// Run watches the bucket until ctx ends, watching again after a failure;
// while the watch is broken the last records hold. It returns nil when
// ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	for failures := 0; ctx.Err() == nil; {
		err := w.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		failures++
		w.log.Warn("overrides: watching the runtime overrides failed; watching again", "error", err, "failures", failures)
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)):
		}
	}
	return nil
}

func (w *Watcher) watch(ctx context.Context) error {
	kw, err := w.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = kw.Stop() }()
	initial := true
	seen := map[string]Record{} // a watch delivers every value again
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-kw.Updates():
			if !ok {
				return errors.New("overrides: the watch ended")
			}
			if e == nil { // the initial values are all delivered
				initial = false
				w.replace(seen)
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(seen, e.Key())
			} else if r, ok := decode(e.Value()); ok {
				seen[e.Key()] = r
			} else {
				w.log.Warn("overrides: an entry of bucket "+Bucket+" is not an override; ignoring it", "entry", e.Key())
				delete(seen, e.Key())
			}
			if !initial {
				w.replace(seen)
			}
		}
	}
}

// replace makes records the ones in force and tells OnChange.
func (w *Watcher) replace(records map[string]Record) {
	w.mu.Lock()
	w.records = make(map[string]Record, len(records))
	for k, r := range records {
		w.records[k] = r
	}
	w.mu.Unlock()
	if w.OnChange != nil {
		w.OnChange(w.Records())
	}
	w.once.Do(func() { close(w.loaded) })
}
