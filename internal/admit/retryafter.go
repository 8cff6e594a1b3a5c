package admit

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// When a full backlog has room again (docs/admission.md). The drain
// releases due jobs in order of due time (not-before, or when queued) at
// the leak rate, one start every slot = 1/leak_rate, and a job's release
// frees its place (and its key's) once it is copied to READY and acked.
// So, for a job refused now:
//
//   - key-full: when the key's first backlog job leaves: one get of it,
//     and the jobs due before it from a scan of the backlog's head;
//   - queue-full: when the backlog's earliest-due job leaves.
//
// A scan is kept for viewTTL so that a storm of refusals costs one scan
// per queue.
//
// The answer is u + retryMargin, u the latest the job can leave while the
// drain keeps the leak rate: u = max(due, u' + slot) over the jobs ahead
// of it in due order, u' = now before the first. Never before the place
// frees; at most a slot and the margin after it. A cached scan is
// corrected for the releases that may have happened since: the k-th job in
// due order cannot leave before r_k, r_0 = max(due_0, scanned),
// r_k = max(due_k, r_{k−1} + slot), so jobs with r_k < now are taken as
// gone. When the backlog cannot be read the answer is the time to drain a
// whole backlog at the leak rate, logged and counted.

// retryMargin covers the drain's copy to READY and its ack after the
// booked start, and the admitter's own publish.
const retryMargin = 200 * time.Millisecond

// viewTTL is how long a scan of a backlog's head answers refusals.
const viewTTL = 250 * time.Millisecond

// scanJobs bounds a scan of a backlog's head: jobs past it were queued
// later, so they are rarely the earliest due.
const scanJobs = 64

// backlogView is a scan of a backlog's head, sorted by due time then
// sequence (the drain's order).
type backlogView struct {
	at   time.Time
	jobs []queue.Pending
	err  error
	done chan struct{} // closed when the scan ended
}

type retryAfters struct {
	js    jetstream.JetStream
	now   func() time.Time
	mu    sync.Mutex
	views map[string]*backlogView
}

func newRetryAfters(js jetstream.JetStream, now func() time.Time) *retryAfters {
	return &retryAfters{js: js, now: now, views: make(map[string]*backlogView)}
}

// view returns a scan of q's backlog no older than viewTTL, or a new one
// when fresh is set; one scan runs per queue at a time.
func (r *retryAfters) view(ctx context.Context, q string, fresh bool) (*backlogView, error) {
	r.mu.Lock()
	v := r.views[q]
	if v != nil {
		select {
		case <-v.done:
			if v.err != nil || fresh || r.now().Sub(v.at) > viewTTL {
				v = nil
			}
		default: // under way: wait for it
		}
	}
	if v == nil {
		v = &backlogView{done: make(chan struct{})}
		r.views[q] = v
		go r.scan(q, v)
	}
	r.mu.Unlock()
	select {
	case <-v.done:
		return v, v.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *retryAfters) scan(q string, v *backlogView) {
	// Not the caller's context: other refusals wait on this scan too.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	jobs, _, err := queue.ScanBacklog(ctx, r.js, q, scanJobs)
	slices.SortStableFunc(jobs, func(a, b queue.Pending) int {
		if c := a.Due.Compare(b.Due); c != 0 {
			return c
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
	v.at, v.jobs, v.err = r.now(), jobs, err
	close(v.done)
}

// queueFull is how long until q's backlog has a free place: the first
// release.
func (r *retryAfters) queueFull(ctx context.Context, q *config.Queue) (time.Duration, error) {
	return r.until(ctx, q, nil)
}

// keyFull is how long until key has a free place in q's backlog: the
// release of its first job.
func (r *retryAfters) keyFull(ctx context.Context, q *config.Queue, key string) (time.Duration, error) {
	head, found, err := queue.BacklogKeyHead(ctx, r.js, q.Name, key, spillway.Normal)
	if err != nil {
		return 0, err
	}
	if !found {
		return slotEvery(q.Backlog.LeakRate) + retryMargin, nil // its jobs left since
	}
	return r.until(ctx, q, &head)
}

// until is how long until the release of head, or of the backlog's next
// job if head is nil.
func (r *retryAfters) until(ctx context.Context, q *config.Queue, head *queue.Pending) (time.Duration, error) {
	slot := slotEvery(q.Backlog.LeakRate)
	for _, fresh := range []bool{false, true} {
		v, err := r.view(ctx, q.Name, fresh)
		if err != nil {
			return 0, err
		}
		now := r.now()
		// Skip the jobs that may have left since the scan: the k-th in
		// due order leaves at the earliest at r_k.
		m, release := 0, v.at
		for ; m < len(v.jobs); m++ {
			j := v.jobs[m]
			if m == 0 {
				release = later(j.Due, v.at)
			} else {
				release = later(j.Due, release.Add(slot))
			}
			if !release.Before(now) {
				break
			}
		}
		if m == len(v.jobs) && len(v.jobs) > 0 && head == nil {
			continue // every job scanned may be gone: scan again
		}
		// The latest each remaining job leaves while the drain keeps the
		// leak rate: the first a slot from now at the latest (a start
		// booked just before now), each next a slot after the one before,
		// none before it is due.
		u := now
		for _, j := range v.jobs[m:] {
			if head == nil || !before(j, *head) {
				break
			}
			u = later(j.Due, u.Add(slot))
		}
		if head == nil {
			if m == len(v.jobs) {
				// Emptied since it refused the job: room now, or at
				// the latest after the next release.
				return slot + retryMargin, nil
			}
			head = &v.jobs[m]
		}
		return later(head.Due, u.Add(slot)).Add(retryMargin).Sub(now), nil
	}
	return slot + retryMargin, nil // not reached: a fresh scan is never stale
}

// before reports whether the drain releases a before b: by due time, then
// by sequence.
func before(a, b queue.Pending) bool {
	if !a.Due.Equal(b.Due) {
		return a.Due.Before(b.Due)
	}
	return a.Sequence < b.Sequence
}

// fallback is the answer when the backlog cannot be read: the time to
// drain a whole backlog at the leak rate, never below a second.
func fallback(q *config.Queue) time.Duration {
	slot, n := slotEvery(q.Backlog.LeakRate), q.Backlog.Capacity
	if n > int64(maxWait/slot) {
		return maxWait
	}
	return max(time.Second, time.Duration(n)*slot+retryMargin)
}

// maxWait bounds an answer that would overflow (a backlog of billions).
const maxWait = time.Duration(1 << 62)

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
