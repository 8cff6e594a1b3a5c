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
type positions struct {
	js    jetstream.JetStream
	mu    sync.Mutex
	first map[string]uint64
}

const positionRefresh = 500 * time.Millisecond

func newPositions(js jetstream.JetStream) *positions {
	return &positions{js: js, first: make(map[string]uint64)}
}

func (p *positions) position(q string, seq uint64) int64 {
	p.mu.Lock()
	first, ok := p.first[q]
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
	for {
		for _, q := range cfg().Queues {
			// js.Stream fetches the stream's info: one request, no second
			// Info call.
			s, err := p.js.Stream(ctx, queue.StreamName(q.Name, queue.Backlog))
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.first[q.Name] = s.CachedInfo().State.FirstSeq
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
