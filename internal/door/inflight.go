package door

import (
	"container/list"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// inflightWait is how long a submission waits for room under
// http.max_inflight_bytes before it is answered 503: about as long as
// the uploads ahead of it take to be read and decided, so a short burst
// waits and a flood is shed. Its Retry-After says the same.
const inflightWait = time.Second

// inflight bounds the bytes of request bodies the HTTP door holds at
// once (http.max_inflight_bytes): a submission reserves its body's size
// before reading it and gives it back once answered, when its payloads
// are no longer held. Reservations are granted in arrival order, so a
// batch waiting for room is not overtaken forever by single submissions.
// The zero value is not usable: make one with newInflight. It is safe for
// concurrent use.
type inflight struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	peak    int64     // the most used has been
	waiters list.List // of *inflightWaiter, in arrival order

	bytes prometheus.Gauge
	waits prometheus.Counter
	shed  prometheus.Counter
}

type inflightWaiter struct {
	n     int64         // f.mu; read without it once ready is closed
	ready chan struct{} // closed when granted
}

// newInflight returns a bound with its metrics registered in reg (nil: no
// metrics).
func newInflight(reg prometheus.Registerer) *inflight {
	f := &inflight{
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spillway_http_inflight_bytes",
			Help: "Bytes of submission bodies the HTTP door holds now, as reserved under http.max_inflight_bytes."}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{Name: "spillway_http_inflight_waits_total",
			Help: "Submissions that waited for room under http.max_inflight_bytes before being read."}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{Name: "spillway_http_requests_shed_total",
			Help:        "Submissions answered 503 without being read, by why.",
			ConstLabels: prometheus.Labels{"reason": "inflight_bytes"}}),
	}
	if reg != nil {
		reg.MustRegister(f.bytes, f.waits, f.shed)
	}
	return f
}

// acquire reserves n bytes under limit, the current http.max_inflight_bytes,
// waiting until ctx ends for room. A reservation larger than limit takes
// limit: such a request is read alone (and a limit of 0, a configuration
// built without the defaults, bounds nothing). It returns the function that gives
// the bytes back, or false when ctx ended first.
func (f *inflight) acquire(ctx context.Context, n, limit int64) (release func(), ok bool) {
	return f.acquireWithin(ctx, n, limit, 0)
}

// acquireWithin is acquire waiting at most wait (0: no bound but ctx).
// The timer is made only when the request has to wait: most find room.
func (f *inflight) acquireWithin(ctx context.Context, n, limit int64, wait time.Duration) (release func(), ok bool) {
	n = min(max(n, 0), limit)
	f.mu.Lock()
	if limit != f.limit {
		f.limit = limit
		f.grant() // a raised limit lets waiters in
	}
	if f.waiters.Len() == 0 && f.used+n <= f.limit {
		f.used += n
		f.peak = max(f.peak, f.used)
		f.bytes.Set(float64(f.used))
		f.mu.Unlock()
		return f.releaser(n), true
	}
	w := &inflightWaiter{n: n, ready: make(chan struct{})}
	e := f.waiters.PushBack(w)
	f.mu.Unlock()
	f.waits.Inc()

	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	select {
	case <-w.ready:
		return f.releaser(w.n), true
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-w.ready: // granted as ctx ended: take it
		return f.releaser(w.n), true
	default:
	}
	front := f.waiters.Front() == e
	f.waiters.Remove(e)
	if front {
		f.grant() // the waiter that held the others back is gone
	}
	f.shed.Inc()
	return nil, false
}

// releaser gives n bytes back, once.
func (f *inflight) releaser(n int64) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.used -= n
			f.grant()
			f.bytes.Set(float64(f.used))
			f.mu.Unlock()
		})
	}
}

// grant lets in the waiters at the front that fit; f.mu is held. A
// waiter larger than a lowered limit takes the limit, as acquire would.
func (f *inflight) grant() {
	for e := f.waiters.Front(); e != nil; e = f.waiters.Front() {
		w := e.Value.(*inflightWaiter)
		w.n = min(w.n, f.limit)
		if f.used+w.n > f.limit {
			return
		}
		f.used += w.n
		f.peak = max(f.peak, f.used)
		f.waiters.Remove(e)
		close(w.ready)
	}
	f.bytes.Set(float64(f.used))
}

// readSubmission reads a submission's body, of at most limit bytes (a
// larger one is answered with tooBig), once room for it is reserved under
// http.max_inflight_bytes (reserve). release gives the room back: call it
// once the submission is answered. ok is false when r was answered.
func (h *httpDoor) readSubmission(w http.ResponseWriter, r *http.Request, limit int64,
	tooBig func(http.ResponseWriter, *http.Request, int64)) (body []byte, release func(), ok bool) {
	if r.ContentLength > limit {
		tooBig(w, r, limit)
		return nil, nil, false
	}
	if release, ok = h.reserve(w, r, limit); !ok {
		return nil, nil, false
	}
	if body, ok = readBody(w, r, limit, tooBig); !ok {
		release()
		return nil, nil, false
	}
	return body, release, true
}

// reserve reserves room for r's body, of at most limit bytes (its
// Content-Length when it sends one), before the body is read: the
// request waits up to inflightWait for it and is answered 503, Retry-After
// 1, when it does not come (ok false). release gives the room back; call
// it once the answer no longer needs the body.
func (h *httpDoor) reserve(w http.ResponseWriter, r *http.Request, limit int64) (release func(), ok bool) {
	n := limit
	if r.ContentLength >= 0 {
		n = min(r.ContentLength, limit)
	}
	bound := h.cfg().HTTP.MaxInflightBytes
	release, ok = h.inflight.acquireWithin(r.Context(), n, bound, inflightWait)
	if ok {
		return release, true
	}
	retry := retryMS(inflightWait)
	setRetryAfter(w.Header(), retry)
	problem(w, r, http.StatusServiceUnavailable, spillway.Problem{Type: spillway.ProblemUnavailable, Title: "Busy",
		Detail: fmt.Sprintf("the admitter holds as many submission bytes as http.max_inflight_bytes allows (%d); retry after %s", bound, inflightWait),
		Queue:  r.PathValue("queue"), RetryAfterMS: retry})
	return nil, false
}
