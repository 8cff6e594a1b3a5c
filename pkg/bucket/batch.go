package bucket

import (
	"context"
	"fmt"
)

// Job is one decision of a batch: its tiers and its cost, as Store.Decide
// takes them.
type Job struct {
	Tiers []Tier
	Cost  int64
}

// BatchStore is a Store that decides a run of jobs of one group in order,
// in as few round trips as it can: job i+1 is decided on the state job i
// left, exactly as Decide called once per job, one after the other, with
// nothing in between. The admitter's batch submit uses it when the store
// has it, and calls Decide per job otherwise.
type BatchStore interface {
	Store
	// DecideBatch decides jobs in order and returns one decision per job.
	// An error fails the whole run: the decisions before the failure may
	// have been applied (as for a Decide whose round trip failed).
	DecideBatch(ctx context.Context, group string, jobs []Job) ([]Decision, error)
}

var _ BatchStore = (*Memory)(nil)

// CheckBatch validates every job of a batch as CheckRequest does; the error
// names the job's index.
func CheckBatch(jobs []Job) error {
	for i := range jobs {
		if err := CheckRequest(jobs[i].Tiers, jobs[i].Cost); err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
	}
	return nil
}

// DecideBatch decides jobs in order, each at the store's clock, as Decide
// would one after the other. Nothing blocks; ctx is not used.
func (m *Memory) DecideBatch(_ context.Context, group string, jobs []Job) ([]Decision, error) {
	if err := CheckBatch(jobs); err != nil {
		return nil, err
	}
	out := make([]Decision, len(jobs))
	for i := range jobs {
		if err := m.decide(&out[i], m.now(), group, jobs[i].Tiers, jobs[i].Cost); err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
	}
	return out, nil
}
