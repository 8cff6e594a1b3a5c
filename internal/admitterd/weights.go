package admitterd

import (
	"context"
	"time"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// publishWeights writes each queue's fairness weights to the entry every
// worker's drain follows (pace.PublishWeights), so that a reload's weights
// reach the jobs already waiting in the backlogs, not only the jobs
// submitted after it (docs/design.md#fair-drain). A failure is logged:
// the admitter runs the configuration all the same, and the drain weighs
// keys by the weights it knew.
func (s *Service) publishWeights(ctx context.Context, cfg *config.Config) {
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	kv, err := pace.OpenPacerBucket(octx, s.js, max(cfg.NATS.Replicas, 1))
	cancel()
	if err != nil {
		s.log.Warn("the queues' fairness weights were not published to their workers; their waiting jobs keep the weights the drain knew", "error", err)
		return
	}
	for _, q := range cfg.Queues {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pace.PublishWeights(wctx, kv, q.Name, q.Backlog.Fairness.Weights)
		cancel()
		if err != nil {
			s.log.Warn("the queue's fairness weights were not published to its workers; its waiting jobs keep the weights the drain knew", "queue", q.Name, "error", err)
		}
	}
}
