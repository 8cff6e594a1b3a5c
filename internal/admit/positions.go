package admit

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// positions estimates a queued job's place in its backlog from its stream
// sequence and the backlog's first sequence, which a background loop
// refreshes (so an answer costs no extra round trip). Jobs of other keys
// may leave out of order, so it is an estimate: never below 1.
//
// The loop looks closely only at busy queues: every positionRefresh at
// each queue that queued a job here lately or held jobs at the last look
// (hot), one request each; and every positionSweep at all of them at once,
// from JetStream's paged list of backlog streams (a request per 256
// queues). An idle queue thus costs next to nothing, however many there
// are, and its first sequence is still right when a job arrives: it can
// only have moved if jobs left the backlog, and a backlog with jobs is hot.
type positions struct {
	js    jetstream.JetStream
	mu    sync.Mutex
	first map[string]uint64
	hot   map[string]time.Time // when the queue was last seen busy
}

const (
	positionRefresh = 500 * time.Millisecond
	positionSweep   = 10 * time.Second
	// hotFor is how long a queue stays hot after its last queued job here
	// or its last look with jobs in the backlog.
	hotFor = 30 * time.Second
)

func newPositions(js jetstream.JetStream) *positions {
	return &positions{js: js, first: make(map[string]uint64), hot: make(map[string]time.Time)}
}

func (p *positions) position(q string, seq uint64) int64 {
	p.mu.Lock()
	first, ok := p.first[q]
	p.hot[q] = time.Now()
	p.mu.Unlock()
	if first == 0 {
		first = 1 // a backlog that never held a job starts at sequence 1
	}
	if !ok || seq < first {
		return 1
	}
	return int64(seq-first) + 1
}

func (p *positions) run(ctx context.Context, cfg func() *config.Config) error {
	t := time.NewTicker(positionRefresh)
	defer t.Stop()
	var swept time.Time
	for {
		if time.Since(swept) >= positionSweep {
			if p.sweep(ctx, cfg()) {
				swept = time.Now()
			}
		} else {
			p.refreshHot(ctx, cfg())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweep reads every configured queue's backlog from the stream list; it
// reports whether the listing went through.
func (p *positions) sweep(ctx context.Context, c *config.Config) bool {
	names := make(map[string]string, len(c.Queues))
	for _, q := range c.Queues {
		names[queue.StreamName(q.Name, queue.Backlog)] = q.Name
	}
	l := p.js.ListStreams(ctx, jetstream.WithStreamListSubject(queue.BacklogSubjects))
	now := time.Now()
	for s := range l.Info() {
		q, ok := names[s.Config.Name]
		if !ok {
			continue
		}
		p.mu.Lock()
		p.first[q] = s.State.FirstSeq
		if s.State.Msgs > 0 {
			p.hot[q] = now
		}
		p.mu.Unlock()
	}
	return l.Err() == nil
}

// refreshHot reads the backlog of each hot queue, and forgets the queues
// that cooled down.
func (p *positions) refreshHot(ctx context.Context, c *config.Config) {
	now := time.Now()
	for _, q := range c.Queues {
		p.mu.Lock()
		at, ok := p.hot[q.Name]
		if ok && now.Sub(at) > hotFor {
			delete(p.hot, q.Name)
			ok = false
		}
		p.mu.Unlock()
		if !ok {
			continue
		}
		// js.Stream fetches the stream's info: one request, no second
		// Info call.
		s, err := p.js.Stream(ctx, queue.StreamName(q.Name, queue.Backlog))
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.first[q.Name] = s.CachedInfo().State.FirstSeq
		if s.CachedInfo().State.Msgs > 0 {
			p.hot[q.Name] = now
		}
		p.mu.Unlock()
	}
}
