// Package leadership elects one process at a time to lead a piece of
// work, under a lease kept in a JetStream key-value entry.
//
// # The lease
//
// The holder writes its entry every TTL/4; the others read it every TTL/4
// and take it over — with an update at the revision they read, so only one
// of them can — once it has not changed for TTL by their own clock. No
// clock is compared with another machine's, so clock skew cannot make two
// leaders; a leader that cannot write its entry for TTL stops leading
// before another can have taken over. Hold runs the leader's work while
// the lease is held and ends it when the lease is lost; on the way out it
// lets the lease go, so that a successor need not wait for TTL.
package leadership

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// requestTimeout bounds one read or take-over of the lease.
const requestTimeout = 5 * time.Second

// Elector holds, or waits for, one lease: the entry key of a key-value
// bucket. Its zero value is not usable: make one with NewElector. Hold is
// not safe to call twice at once.
type Elector struct {
	kv  jetstream.KeyValue
	key string
	id  string
	ttl time.Duration
	log func(msg string, args ...any)
}

// NewElector returns an elector for the lease at key in kv, held for ttl
// without a renewal; this process's claims carry a random id of its own.
// log, if not nil, is told when the lease is taken over or lost.
func NewElector(kv jetstream.KeyValue, key string, ttl time.Duration, log func(msg string, args ...any)) *Elector {
	if log == nil {
		log = func(string, ...any) {}
	}
	return &Elector{kv: kv, key: key, id: uuid.NewString(), ttl: ttl, log: log}
}

// Hold runs lead while this process holds the lease, as often as it gets
// it, until ctx ends; lead's context ends when the lease is lost. On the
// way out it lets the lease go, so a successor need not wait for ttl.
func (l *Elector) Hold(ctx context.Context, lead func(context.Context)) {
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
func (l *Elector) acquire(ctx context.Context, seenRev *uint64, seenAt *time.Time) (uint64, bool) {
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
		l.log("the leader stopped renewing its lease; taking over", "key", l.key, "after", l.ttl)
	}
	rev, err := l.kv.Update(rctx, l.key, []byte(l.id), e.Revision())
	return rev, err == nil
}

// lead runs lead while renewing the lease at rev.
func (l *Elector) lead(ctx context.Context, rev uint64, lead func(context.Context)) {
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
			l.log("lost the lease; no longer leading", "key", l.key, "error", err)
			cancel()
			<-done
			return
		}
	}
}

// release lets the lease go, so the next process takes it at once. A
// renewal the server applied after its caller gave up waiting leaves the
// entry at a later revision, still this process's: it is let go there.
func (l *Elector) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := l.kv.Update(ctx, l.key, nil, rev); err == nil {
		return
	}
	if e, err := l.kv.Get(ctx, l.key); err == nil && string(e.Value()) == l.id {
		_, _ = l.kv.Update(ctx, l.key, nil, e.Revision())
	}
}
