package worker

import (
	"sync/atomic"
	"time"
)

// keepIdle is how long a kept goroutine waits for its next job.
const keepIdle = 10 * time.Second

// keeper runs each job's execution on a goroutine it keeps for the next
// one. A job's goroutine grows its stack to what a handler's call, a KV put
// and an ack need; started anew for every job, each grew it again (a
// profile of a worker at 64 slots put 13 % of its CPU in copying stacks).
// A kept goroutine waits for its next function at most keepIdle, and every
// idle one ends when stop is called; one running a function ends after it.
// The zero keeper is not usable: newKeeper makes one.
type keeper struct {
	work    chan func()
	quit    chan struct{}
	started atomic.Int64 // goroutines started, for tests
	idle    atomic.Int64 // goroutines waiting for a function, for tests
}

func newKeeper() *keeper {
	return &keeper{work: make(chan func()), quit: make(chan struct{})}
}

// Go runs f on a waiting kept goroutine, or on a new one.
func (k *keeper) Go(f func()) {
	select {
	case k.work <- f:
	default:
		k.started.Add(1)
		go k.run(f)
	}
}

func (k *keeper) run(f func()) {
	var wait *time.Timer
	for {
		f()
		if wait == nil {
			wait = time.NewTimer(keepIdle)
		} else {
			wait.Reset(keepIdle)
		}
		k.idle.Add(1)
		select {
		case f = <-k.work:
			k.idle.Add(-1)
		case <-wait.C:
			k.idle.Add(-1)
			return
		case <-k.quit:
			k.idle.Add(-1)
			wait.Stop()
			return
		}
	}
}

// stop ends the idle goroutines, and each running one when its function
// returns. It does not wait: a handler that ignores its context may run
// on. Go after stop still runs f, on a goroutine that ends after it.
func (k *keeper) stop() { close(k.quit) }
