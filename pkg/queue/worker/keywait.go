package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
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
//     (keyWaits.most); a job that would wait beyond them goes to READY's
//     tail instead, due a little later (keytail.go), so that a key with
//     many jobs in READY does not hold back the jobs behind them.
//   - A backlog job whose key is at its max is not started: its grant goes
//     back (keyGrantBack later), and whoever takes it books a new start.
//   - The slots are renewed every AckWait/3 while the job runs, and given
//     back when it ends, however it ends.

// keyGrantBack is how long a backlog grant whose key is at its max waits
// before a worker takes it again.
const keyGrantBack = 500 * time.Millisecond

// keyWaits are a worker's side of the key slots: the slots and the READY
// jobs waiting here for one, or for their not-before after a move to
// READY's tail (keytail.go).
type keyWaits struct {
	slots *keyslots.Slots
	most  int // READY jobs that may wait here for a key slot

	mu      sync.Mutex
	waiting int
	// until: while most jobs wait, the pull waits until then, or until
	// one stops waiting — READY's head was a job this worker moved to
	// the tail lately, not due yet (keyWaits.pause).
	until time.Time
	freed chan struct{} // closed, and replaced, when a waiter stops waiting
}

// newKeyWaits returns the key slots of a worker of cfg in kv.
func newKeyWaits(kv jetstream.KeyValue, cfg WorkerConfig) *keyWaits {
	return &keyWaits{
		slots: keyslots.New(kv, cfg.Queue.Name, cfg.AckWait),
		most:  cfg.Concurrency,
		freed: make(chan struct{}),
	}
}

// room lets a pull ask for n jobs. A full set of waiters does not stop
// the pull: a job that would wait beyond it goes to READY's tail
// instead, so other keys' jobs go on starting. The pull waits, until a
// waiter stops waiting, only while more than most wait (a move to the
// tail failed, and the job waits here all the same) or, until the pause
// ends, while the set is full and READY's head is a job moved lately and
// not due (pause); during the pause it asks for no more jobs than may
// wait. It returns 0 if done closes first.
func (k *keyWaits) room(done <-chan struct{}, n int) int {
	if k == nil {
		return n
	}
	for {
		k.mu.Lock()
		places := k.most - k.waiting
		paused := time.Until(k.until)
		ch := k.freed
		k.mu.Unlock()
		var t *time.Timer
		var timeout <-chan time.Time
		switch {
		case places < 0:
		case paused <= 0:
			return n
		case places > 0:
			return min(n, places) // READY's head is a job moved lately: no more than may wait
		default:
			t = time.NewTimer(paused)
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
		case <-done:
			n = 0
		}
		if t != nil {
			t.Stop()
		}
		if n == 0 {
			return 0
		}
	}
}

// enter takes a place among the waiters, if one is free.
func (k *keyWaits) enter() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.waiting >= k.most {
		return false
	}
	k.waiting++
	return true
}

// force takes a place among the waiters even beyond most: a job whose
// move to the tail failed waits here, and the pull waits for it (room).
// So about one pull's jobs (worker.concurrency) wait beyond most: a
// pull that starts before the last pull's jobs got here may add its own.
func (k *keyWaits) force() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waiting++
}

// leave gives a waiter's place back.
func (k *keyWaits) leave() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waiting--
	close(k.freed)
	k.freed = make(chan struct{})
}

// pause makes the pull wait, while the set is full, until t at most.
func (k *keyWaits) pause(t time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t.After(k.until) {
		k.until = t
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
// and set false), its delivery kept alive, until it holds them; placed
// says it holds a waiter's place already (it waited for its not-before).
// If no place is free the job goes to READY's tail instead (toTail). It
// reports false when the job does not run here: moved, or the worker
// stopped first and the job was handed back, not having started.
func (r *runner) waitKeys(e *execution, slot *bool, placed bool) bool {
	if r.keys == nil || len(e.job.Concurrency) == 0 {
		return true
	}
	h, ok, err := r.keys.slots.TryAcquire(r.ctx, e.job.ID, e.job.Concurrency)
	if ok {
		if placed {
			r.keys.leave()
		}
		r.hold(e, h)
		return true
	}
	if err != nil && r.ctx.Err() == nil {
		r.log.Warn("reading a job's key slots failed; it waits and looks again", "job", e.job.ID, "error", err)
	}
	if !placed && !r.keys.enter() {
		moves := queue.KeyMoves(e.header)
		if r.toTail(e, time.Now().Add(keyTailDelay(moves)), moves+1) {
			return false
		}
		r.keys.force() // not moved: it waits here, beyond the bound
	}
	if *slot {
		r.slots.put()
		*slot = false
	}
	r.observe(Event{Kind: KeyWaiting, Job: e.job, Attempt: e.attempt, Stream: e.stream, Sequence: e.seq})
	stop := heartbeat(e.msg, r.cfg.AckWait/3)
	h, err = r.keys.slots.Acquire(r.ctx, e.job.ID, e.job.Concurrency, nil)
	stop()
	r.keys.leave()
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
