package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/keyslots"
)

// Per-key concurrency (docs/design.md#per-key-concurrency): a job stamped
// with concurrency bounds (queue.Job.Concurrency) starts only once it
// holds a slot of each of its keys (keyslots), shared by every worker of
// the queue.
//
//   - A READY job whose key is at its max waits in this worker without a
//     handler slot, its delivery kept alive with heartbeats (a nak would
//     count a try), until a slot frees; then it takes a handler slot and
//     runs. Other keys' jobs go on starting: the pull goes on while
//     handlers are free. The jobs waiting so in one worker are bounded
//     (keyWaits.most); while that many wait, the worker pulls nothing.
//   - A backlog job whose key is at its max is not started: its grant goes
//     back (keyGrantBack later), and whoever takes it books a new start.
//   - The slots are renewed every AckWait/3 while the job runs, and given
//     back when it ends, however it ends.

// keyGrantBack is how long a backlog grant whose key is at its max waits
// before a worker takes it again.
const keyGrantBack = 500 * time.Millisecond

// keyWaits are a worker's side of the key slots: the slots and the READY
// jobs waiting for one.
type keyWaits struct {
	slots *keyslots.Slots
	most  int // READY jobs that may wait for a key slot in this worker

	mu      sync.Mutex
	waiting int
	freed   chan struct{} // closed, and replaced, when a waiter stops waiting
}

// newKeyWaits returns the key slots of a worker of cfg in kv.
func newKeyWaits(kv jetstream.KeyValue, cfg WorkerConfig) *keyWaits {
	return &keyWaits{
		slots: keyslots.New(kv, cfg.Queue.Name, cfg.AckWait),
		most:  cfg.Concurrency,
		freed: make(chan struct{}),
	}
}

// room bounds n, the jobs a pull may ask for, by how many more may wait
// for a key slot here; while none may, it waits. It returns 0 if done
// closes first.
func (k *keyWaits) room(done <-chan struct{}, n int) int {
	if k == nil {
		return n
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for k.waiting >= k.most {
		ch := k.freed
		k.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			k.mu.Lock()
			return 0
		}
		k.mu.Lock()
	}
	return min(n, k.most-k.waiting)
}

func (k *keyWaits) add(d int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waiting += d
	if d < 0 {
		close(k.freed)
		k.freed = make(chan struct{})
	}
}

// keyHold is the key slots an execution holds, renewed while it runs.
type keyHold struct {
	h    *keyslots.Hold
	stop func()
}

// hold keeps h's slots alive for e, renewing them every AckWait/3 until e
// ends (releaseKeys).
func (r *runner) hold(e *execution, h *keyslots.Hold) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(r.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), r.cfg.AckWait/3)
				if err := h.Renew(ctx); err != nil {
					r.log.Warn("renewing a job's key slots failed; the next beat tries again", "job", e.job.ID, "error", err)
				}
				cancel()
			case <-done:
				return
			}
		}
	})
	e.keys = &keyHold{h: h, stop: func() { close(done); wg.Wait() }}
}

// releaseKeys gives back the key slots of e, which ended.
func (r *runner) releaseKeys(e *execution) {
	if e.keys == nil {
		return
	}
	e.keys.stop()
	ctx, cancel := settleCtx(context.Background())
	defer cancel()
	if err := e.keys.h.Release(ctx); err != nil {
		r.log.Warn("giving a job's key slots back failed; other workers take them once their lease passes", "job", e.job.ID, "error", err)
	}
	e.keys = nil
}

// waitKeys takes the key slots of READY job e before it runs. A job whose
// key is at its max waits here, without a handler slot (slot is put back
// and set false), its delivery kept alive, until it holds them. It
// reports false when the worker stopped first: the job is handed back,
// not having started.
func (r *runner) waitKeys(e *execution, slot *bool) bool {
	if r.keys == nil || len(e.job.Concurrency) == 0 {
		return true
	}
	h, ok, err := r.keys.slots.TryAcquire(r.ctx, e.job.ID, e.job.Concurrency)
	if ok {
		r.hold(e, h)
		return true
	}
	if err != nil && r.ctx.Err() == nil {
		r.log.Warn("reading a job's key slots failed; it waits and looks again", "job", e.job.ID, "error", err)
	}
	if *slot {
		r.slots.put()
		*slot = false
	}
	r.keys.add(1)
	r.observe(Event{Kind: KeyWaiting, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	stop := heartbeat(e.msg, r.cfg.AckWait/3)
	h, err = r.keys.slots.Acquire(r.ctx, e.job.ID, e.job.Concurrency, nil)
	stop()
	r.keys.add(-1)
	r.observe(Event{Kind: KeyWaited, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	if err != nil {
		if e.claim() { // stopping before it started: not a try
			if err := e.msg.Nak(); err != nil {
				r.log.Warn("handing a job back failed; JetStream will deliver it again after the ack wait", "job", e.job.ID, "error", err)
			}
		}
		return false
	}
	r.hold(e, h)
	return true
}

// startKeys takes the key slots of backlog job e at its start. If a key is
// at its max the grant goes back, to be taken again after keyGrantBack and
// booked a new start, and startKeys reports false.
func (r *runner) startKeys(e *execution) bool {
	if r.keys == nil || len(e.job.Concurrency) == 0 {
		return true
	}
	h, ok, err := r.keys.slots.TryAcquire(r.ctx, e.job.ID, e.job.Concurrency)
	if ok {
		r.hold(e, h)
		return true
	}
	if err != nil {
		r.log.Warn("reading a backlog job's key slots failed; its grant goes back", "job", e.job.ID, "error", err)
	}
	r.observe(Event{Kind: KeyWaiting, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	if err := e.msg.NakWithDelay(keyGrantBack); err != nil {
		r.log.Warn("handing a backlog grant back failed; it is delivered again after the ack wait", "error", err)
	}
	return false
}
