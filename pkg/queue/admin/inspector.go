package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Snapshot is the state of many queues, read at one time by an Inspector.
type Snapshot struct {
	At time.Time
	// Infos holds each queue's Info, Errs why a queue's could not be read
	// (it is then not in Infos).
	Infos map[string]Info
	Errs  map[string]error
	// Pause and Leak are the queues' pause and pushback states, from the
	// pacers' bucket (absent: never paused, never pushed back).
	Pause map[string]pace.PauseState
	Leak  map[string]pace.LeakState
}

// covers reports whether s has something to say of every queue of cfgs.
func (s *Snapshot) covers(cfgs []queue.Config) bool {
	for _, c := range cfgs {
		if _, ok := s.Infos[c.Name]; !ok {
			if _, ok := s.Errs[c.Name]; !ok {
				return false
			}
		}
	}
	return true
}

// Inspector reads the state of all of a deployment's queues in few
// requests, and shares the result: what /metrics and GET /v1/queues show
// (docs/design.md#many-queues). Inspect costs about seven JetStream requests
// a queue; a refresh of an Inspector costs
//
//   - the paged stream list (a request per 256 streams, four streams a
//     queue), which holds every stream's state;
//   - one listing of the pause and pushback entries of the pacers' bucket;
//   - the two consumers of each queue whose streams changed or hold jobs,
//     or whose consumer figures are older than ConsumerMaxAge, at most
//     Parallel requests at a time. An idle queue's consumers have nothing
//     in flight; only their waiting pulls can change.
//
// A refresh runs when a caller asks for a snapshot older than MaxAge, one
// at a time; callers meanwhile wait up to Wait for it, then take the
// snapshot they have. An Inspector nobody asks costs nothing.
type Inspector struct {
	js jetstream.JetStream
	// MaxAge is how old a snapshot may be before a caller refreshes it
	// (default 1s); Wait how long a caller holding an older snapshot waits
	// for the refresh (default 300ms); ConsumerMaxAge how old an idle
	// queue's consumer figures may get (default 30s); Parallel bounds the
	// consumer requests under way (default 16).
	MaxAge, Wait, ConsumerMaxAge time.Duration
	Parallel                     int

	mu   sync.Mutex
	snap *Snapshot
	busy chan struct{} // closed when the refresh under way ends
	cons map[string]consumerState
}

// consumerState is a queue's consumer figures as last read.
type consumerState struct {
	at   time.Time
	mark [len(inspected) + 1]uint64 // the streams' last sequences then
	c    consumers
}

// NewInspector returns an Inspector reading js.
func NewInspector(js jetstream.JetStream) *Inspector {
	return &Inspector{js: js, MaxAge: time.Second, Wait: 300 * time.Millisecond, ConsumerMaxAge: 30 * time.Second,
		Parallel: 16, cons: make(map[string]consumerState)}
}

// Snapshot returns the state of the queues of cfgs: the last snapshot if
// it is younger than MaxAge, else a fresh one — or, when the refresh takes
// longer than Wait, the last one all the same. It fails only when there is
// no snapshot of all those queues and none comes before ctx ends.
func (in *Inspector) Snapshot(ctx context.Context, cfgs []queue.Config) (*Snapshot, error) {
	in.mu.Lock()
	s := in.snap
	usable := s != nil && s.covers(cfgs)
	if usable && time.Since(s.At) < in.MaxAge {
		in.mu.Unlock()
		return s, nil
	}
	if in.busy == nil {
		in.busy = make(chan struct{})
		go in.refresh(cfgs, in.busy)
	}
	busy := in.busy
	in.mu.Unlock()
	var wait <-chan time.Time
	if usable {
		t := time.NewTimer(in.Wait)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-busy:
		in.mu.Lock()
		s = in.snap
		in.mu.Unlock()
		if s == nil || !s.covers(cfgs) {
			return nil, errors.New("admin: the queues' state could not be read from JetStream")
		}
		return s, nil
	case <-wait:
		return s, nil
	case <-ctx.Done():
		if usable {
			return s, nil
		}
		return nil, fmt.Errorf("admin: reading the queues' state: %w", ctx.Err())
	}
}

// Invalidate drops the snapshot, after a change the next caller must see
// (a pause): that caller waits for a fresh one.
func (in *Inspector) Invalidate() {
	in.mu.Lock()
	in.snap = nil
	in.mu.Unlock()
}

// refreshTimeout bounds one refresh.
const refreshTimeout = 30 * time.Second

func (in *Inspector) refresh(cfgs []queue.Config, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	s, err := in.read(ctx, cfgs)
	in.mu.Lock()
	if err == nil {
		in.snap = s
	}
	in.busy = nil
	in.mu.Unlock()
	close(done)
}

func (in *Inspector) read(ctx context.Context, cfgs []queue.Config) (*Snapshot, error) {
	s := &Snapshot{At: time.Now(), Infos: make(map[string]Info, len(cfgs)), Errs: map[string]error{},
		Pause: map[string]pace.PauseState{}, Leak: map[string]pace.LeakState{}}
	type slot struct {
		q int
		i int // in inspected, or len(inspected) for GRANTS
	}
	streams := make(map[string]slot, 4*len(cfgs))
	for q, c := range cfgs {
		for i, d := range inspected {
			streams[queue.StreamName(c.Name, d)] = slot{q, i}
		}
		streams[queue.GrantsStreamName(c.Name)] = slot{q, len(inspected)}
	}
	states := make([][len(inspected) + 1]*jetstream.StreamInfo, len(cfgs))
	l := in.js.ListStreams(ctx, jetstream.WithStreamListSubject(queue.SubjectRoot+">"))
	for si := range l.Info() {
		if at, ok := streams[si.Config.Name]; ok {
			states[at.q][at.i] = si
		}
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("admin: listing the queues' streams: %w", err)
	}
	if err := in.pacerEntries(ctx, s); err != nil {
		return nil, err
	}

	// The consumers of the queues that need a look, Parallel at a time.
	type job struct {
		q    int
		mark [len(inspected) + 1]uint64
	}
	var (
		todo []job
		wg   sync.WaitGroup
		mu   sync.Mutex
		sem  = make(chan struct{}, max(1, in.Parallel))
		got  = make(map[int]consumers)
		errs = make(map[int]error)
	)
	in.mu.Lock()
	for q, c := range cfgs {
		st := states[q]
		if st[0] == nil || st[1] == nil || st[2] == nil {
			s.Errs[c.Name] = fmt.Errorf("admin: inspecting %s: a stream of the queue is missing", c.Name)
			continue
		}
		var mark [len(inspected) + 1]uint64
		busy := st[0].State.Msgs > 0
		for i, si := range st {
			if si != nil {
				mark[i] = si.State.LastSeq
			}
		}
		if st[len(inspected)] != nil && st[len(inspected)].State.Msgs > 0 {
			busy = true
		}
		prev, ok := in.cons[c.Name]
		if ok && !busy && prev.mark == mark && time.Since(prev.at) < in.ConsumerMaxAge {
			got[q] = prev.c
			continue
		}
		todo = append(todo, job{q, mark})
	}
	in.mu.Unlock()
	for _, j := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			name := cfgs[j.q].Name
			ready, err := consumerInfo(ctx, in.js, queue.StreamName(name, queue.Ready), worker.ReadyConsumer)
			var grants *jetstream.ConsumerInfo
			if err == nil {
				grants, err = consumerInfo(ctx, in.js, queue.GrantsStreamName(name), worker.GrantsConsumer)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[j.q] = err
				return
			}
			got[j.q] = consumerFigures(ready, grants)
		})
	}
	wg.Wait()
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, j := range todo {
		if c, ok := got[j.q]; ok {
			in.cons[cfgs[j.q].Name] = consumerState{at: now, mark: j.mark, c: c}
		}
	}
	for q, c := range cfgs {
		if _, ok := s.Errs[c.Name]; ok {
			continue
		}
		if err := errs[q]; err != nil {
			s.Errs[c.Name] = err
			continue
		}
		var st [len(inspected)]*jetstream.StreamInfo
		copy(st[:], states[q][:len(inspected)])
		s.Infos[c.Name] = infoOf(c, st, got[q])
	}
	return s, nil
}

// pacerEntries reads every queue's pause and pushback entry in one
// listing of the pacers' bucket.
func (in *Inspector) pacerEntries(ctx context.Context, s *Snapshot) error {
	kv, err := in.js.KeyValue(ctx, pace.PacerBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("admin: pacer bucket %s: %w", pace.PacerBucket, err)
	}
	w, err := kv.WatchFiltered(ctx, []string{pace.PauseKey("*"), pace.LeakStateKey("*")}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("admin: listing the pause and pushback states: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("admin: listing the pause and pushback states: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return nil // the initial values are in
			}
			k := e.Key()
			if q, ok := strings.CutSuffix(k, ".paused"); ok {
				s.Pause[q] = pace.DecodePause(e.Value())
			} else if q, ok := strings.CutSuffix(k, ".pushback"); ok {
				if st, err := pace.DecodeLeak(e.Value()); err == nil {
					s.Leak[q] = st
				}
			}
		}
	}
}
