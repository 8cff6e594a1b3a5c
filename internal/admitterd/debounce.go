package admitterd

import (
	"context"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/jobstatus"
)

// debounceTTL is how long an entry of the debounce bucket lives after
// its last write: longer than any debounced job of cfg can wait (a
// queue's backlog.max_delay bounds a debounce), and at least a day, so
// that a reload that raises a max_delay rarely outgrows it.
func debounceTTL(cfg *config.Config) time.Duration {
	ttl := 24 * time.Hour
	for _, q := range cfg.Queues {
		ttl = max(ttl, q.Backlog.MaxDelay)
	}
	return ttl + time.Hour
}

// superseder supersedes the admitter's debounced jobs in the job status
// store (admit.Superseder).
type superseder struct{ store *jobstatus.Store }

func (s superseder) Supersede(ctx context.Context, j admit.Superseded) (bool, error) {
	return s.store.Supersede(ctx, jobstatus.Record{ID: j.ID, Queue: j.Queue, Submitter: j.Submitter, SupersededBy: j.By,
		BacklogSeq: j.BacklogSeq, EnqueuedAt: j.EnqueuedAt, NotBefore: j.NotBefore})
}
