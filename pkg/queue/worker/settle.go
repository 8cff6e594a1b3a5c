package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/internal/loop"
)

// settleTimeout bounds one ack, nak or dead-letter publish.
const settleTimeout = 10 * time.Second

// settleCtx is the context for settling a job: not canceled with the
// worker's, so a stopping worker still acks what finished.
func settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// heartbeat tells JetStream every interval that msg is still being worked
// on, so that AckWait does not hand it to another worker. The returned
// function stops it; no beat is sent after it returns. A timer, not a
// goroutine: most jobs end before their first beat, and a goroutine with
// a ticker and a channel per job (twice per backlog job: its start's wait
// and its run) cost the worker a few percent of its CPU in scheduling.
func heartbeat(msg jetstream.Msg, every time.Duration) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock() // t is set before the first beat reads it
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress() // a lost beat is covered by the next one
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// ackGrant acknowledges a backlog job's grant without waiting for
// JetStream to confirm: the job's durable end is its backlog message's
// delete, made before. A grant whose ack is lost is delivered again after
// the ack wait, finds no backlog message and is acked again (drainer.start).
func ackGrant(msg jetstream.Msg) error {
	if err := msg.Ack(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		return err
	}
	return nil
}

// ack acknowledges msg and waits for JetStream to confirm, trying again a
// few times on a timeout: a READY job's ack is its durable end.
func ack(ctx context.Context, msg jetstream.Msg) error {
	var err error
	for try := 1; try <= 3; try++ {
		if err = msg.DoubleAck(ctx); err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		_ = loop.Sleep(ctx, loop.Backoff(try))
	}
	return err
}
