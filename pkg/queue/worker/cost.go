package worker

import (
	"context"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// settleCost hands a succeeded job's reported actual cost to
// WorkerConfig.SettleCost before its outcome is recorded and it is acked.
// A failure is logged: the job's outcome does not depend on it.
func (r *runner) settleCost(ctx context.Context, j *queue.Job) {
	if r.cfg.SettleCost == nil || j == nil {
		return
	}
	n, ok := j.CostActual()
	if !ok || n == j.Cost {
		return
	}
	if err := r.cfg.SettleCost(ctx, j, n); err != nil {
		r.log.Warn("settling a job's actual cost failed; the job is done all the same, its cost stays as decided",
			"job", j.ID, "cost", j.Cost, "actual", n, "error", err)
	}
}
