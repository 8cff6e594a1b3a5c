package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Cancelling a queued job (docs/design.md#cancel) takes two steps, and
// this package owns the second:
//
//  1. The job's status record goes from queued to cancelled under a
//     revision check (internal/jobstatus). A worker about to start a
//     backlog job first moves the same record to running under the same
//     check (worker.WorkerConfig.StartGate), so exactly one of them wins: a job
//     is either cancelled and never started, or started and not
//     cancelled.
//  2. CancelBacklogJob deletes the job's backlog message, freeing its
//     place (and its key's) at once. A grant for it that a worker takes
//     later finds no message and runs nothing. If this step fails, the
//     worker that is granted the job finds it cancelled at its start gate
//     and deletes it then (worker.ErrJobCancelled).

// CancelBacklogJob deletes job id's message, at sequence seq of queue's
// backlog. It checks that the message there is job id before deleting it;
// a message that is gone already (deleted before, or settled) is not an
// error. Call it only for a job that can no longer start — one whose
// status record is cancelled — or the job may run all the same (see
// WorkerConfig.StartGate).
func CancelBacklogJob(ctx context.Context, js jetstream.JetStream, q string, seq uint64, id string) error {
	if seq == 0 {
		return fmt.Errorf("admin: cancel job %s: no backlog sequence", id)
	}
	s, err := queue.Stream(ctx, js, queue.StreamName(q, queue.Backlog)) // a gone message confirmed by the stream's leader
	if err != nil {
		return fmt.Errorf("admin: backlog of %s: %w", q, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("admin: cancel job %s: reading backlog message %d: %w", id, seq, err)
	}
	if got := m.Header.Get(spillway.HeaderJobID); got != id {
		return fmt.Errorf("%w: cancel job %s: backlog message %d of %s is job %.64q", ErrNotThisJob, id, seq, q, got)
	}
	if err := queue.RemoveMsg(ctx, s, seq); err != nil {
		return fmt.Errorf("admin: cancel job %s: deleting backlog message %d: %w", id, seq, err)
	}
	return nil
}
