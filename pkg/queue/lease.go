package queue

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// lease elects one worker process to lead a queue's drain. The holder
// writes its entry in the pacer bucket every ttl/4; the others read it every
// ttl/4 and take it over — with an update at the revision they read, so
// only one of them can — once it has not changed for ttl by their own
// clock. No clock is compared with another machine's, so clock skew cannot
// make two leaders; a leader that cannot write its entry for ttl stops
// leading before another can have taken over.
type lease struct {
	kv  jetstream.KeyValue
	key string
	id  string
	ttl time.Duration
	log func(msg string, args ...any)
}

// leaseKey is the lease's entry for queue in the pacer bucket.
func leaseKey(queue string) string { return queue + ".drain-leader" }

// hold runs lead while this process holds the lease, as often as it gets
// it, until ctx ends; lead's context ends when the lease is lost. On the
// way out it lets the lease go, so a successor need not wait for ttl.
func (l *lease) hold(ctx context.Context, lead func(context.Context)) {
	var (
		seenRev uint64
		seenAt  time.Time
	)
	tick := time.NewTicker(l.ttl / 4)
	defer tick.Stop()
	for ctx.Err() == nil {
		rev, ok := l.acquire(ctx, &seenRev, &seenAt)
		if ok {
			l.lead(ctx, rev, lead)
			seenRev, seenAt = 0, time.Time{}
			continue
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// acquire takes the lease if it is free or its holder stopped writing it.
func (l *lease) acquire(ctx context.Context, seenRev *uint64, seenAt *time.Time) (uint64, bool) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	e, err := l.kv.Get(rctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err := l.kv.Create(rctx, l.key, []byte(l.id))
		return rev, err == nil
	case err != nil:
		return 0, false
	}
	if string(e.Value()) != "" && string(e.Value()) != l.id {
		if e.Revision() != *seenRev {
			*seenRev, *seenAt = e.Revision(), time.Now()
			return 0, false
		}
		if time.Since(*seenAt) < l.ttl {
			return 0, false
		}
		l.log("the drain's leader stopped renewing its lease; taking over", "after", l.ttl)
	}
	rev, err := l.kv.Update(rctx, l.key, []byte(l.id), e.Revision())
	return rev, err == nil
}

// lead runs lead while renewing the lease at rev.
func (l *lease) lead(ctx context.Context, rev uint64, lead func(context.Context)) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(lctx)
	}()
	tick := time.NewTicker(l.ttl / 4)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-done:
			cancel()
			l.release(rev)
			return
		case <-ctx.Done():
			cancel()
			<-done
			l.release(rev)
			return
		case <-tick.C:
		}
		rctx, rcancel := context.WithTimeout(lctx, l.ttl/4)
		r, err := l.kv.Update(rctx, l.key, []byte(l.id), rev)
		rcancel()
		switch {
		case err == nil:
			rev, renewed = r, time.Now()
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch), time.Since(renewed) > l.ttl*3/4:
			// Taken over, or unwritable for so long that another worker
			// may take over soon: stop leading first.
			l.log("lost the drain's lease; no longer leading", "error", err)
			cancel()
			<-done
			return
		}
	}
}

// release lets the lease go, so the next worker takes it at once.
func (l *lease) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = l.kv.Update(ctx, l.key, nil, rev)
}
