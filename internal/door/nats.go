package door

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// NATSDoor answers submissions sent as requests to spillway.submit.<queue>,
// in the queue group every admitter joins, so each request reaches one
// admitter; with none running a producer's request fails at once with
// "no responders".
type NATSDoor struct {
	nc       *nats.Conn
	admitter *admit.Admitter
	logger   *slog.Logger
	sub      *nats.Subscription
	batchSub *nats.Subscription // spillway.submitbatch.* (batch.go)
	sem      chan struct{}
	wg       sync.WaitGroup
	// work hands a request to an idle answerer; answerers counts them,
	// quit ends them at Stop (answerer).
	work      chan natsWork
	answerers atomic.Int32
	quit      chan struct{}
	quitOnce  sync.Once
	// inflight bounds the bytes of requests being answered, under
	// http.max_inflight_bytes as the HTTP door's uploads are (a bound of
	// its own: the two doors together hold at most twice the setting).
	inflight *inflight
	// Timeout bounds one submission (default 10s).
	Timeout time.Duration
	// Access is whom the door answers, and where; set it before Start.
	Access NATSAccess
}

// MaxConcurrentNATS bounds submissions the NATS door works on at once;
// more wait in the subscription's buffer.
const MaxConcurrentNATS = 1024

// NewNATS returns a door; Start subscribes.
func NewNATS(nc *nats.Conn, a *admit.Admitter, logger *slog.Logger) *NATSDoor {
	if logger == nil {
		logger = slog.Default()
	}
	return &NATSDoor{nc: nc, admitter: a, logger: logger, sem: make(chan struct{}, MaxConcurrentNATS), inflight: newInflight(nil), Timeout: SubmitTimeout,
		work: make(chan natsWork), quit: make(chan struct{})}
}

// Start subscribes to spillway.submit.* in the admitters' queue group.
func (d *NATSDoor) Start() error {
	sub, err := d.subscribe(spillway.SubmitPrefix, d.answer, 1<<20)
	if err != nil {
		return err
	}
	d.sub = sub
	if err := d.startBatch(); err != nil {
		return err
	}
	return d.nc.Flush()
}

// Stop stops taking submissions (the subscription is drained, so requests
// already received are answered) and waits for those in progress, or for
// ctx.
func (d *NATSDoor) Stop(ctx context.Context) error {
	// Answerers end once their answer in progress is sent.
	defer d.quitOnce.Do(func() { close(d.quit) })
	// The batch subscription is drained first, waiting for nothing: its
	// answers in progress are in d.wg, which the submit door's drain
	// waits for with its own.
	var none sync.WaitGroup
	if err := drainAndWait(ctx, d.batchSub, &none); err != nil {
		return err
	}
	return drainAndWait(ctx, d.sub, &d.wg)
}

// drainAndWait drains sub (nil: none), so that the requests it received
// are still answered, then waits for wg — the answers in progress — or
// for ctx.
func drainAndWait(ctx context.Context, sub *nats.Subscription, wg *sync.WaitGroup) error {
	if sub != nil {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
		for sub.IsValid() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// subscribe takes prefix.* in the admitters' queue group and answers each
// request with answer, in a goroutine of its own, at most MaxConcurrentNATS
// at once and at most http.max_inflight_bytes of request bodies at once:
// a request waits for room before its answer starts, and those behind it
// wait in the subscription's buffer, up to pending requests and
// http.max_inflight_bytes bytes, rather than be dropped as a slow
// consumer. Past that, NATS drops them (a producer's timeout, nothing
// stored; the connection logs the slow consumer): what producers send
// never grows the admitter's memory without bound.
func (d *NATSDoor) subscribe(prefix string, answer func(*nats.Msg), pending int) (*nats.Subscription, error) {
	sub, err := d.nc.QueueSubscribe(prefix+"*", AdmitterGroup, func(m *nats.Msg) {
		release, _ := d.inflight.acquire(context.Background(), int64(len(m.Data)), d.admitter.Config().HTTP.MaxInflightBytes)
		d.sem <- struct{}{}
		d.wg.Add(1)
		w := natsWork{m: m, answer: answer, release: release}
		select {
		case d.work <- w:
		default:
			d.answerers.Add(1)
			go d.answerer(w)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(pending, pendingBytes(d.admitter.Config().HTTP.MaxInflightBytes)); err != nil {
		return nil, err
	}
	return sub, nil
}

// natsWork is a request to answer, with the room it holds (released
// when it is answered).
type natsWork struct {
	m       *nats.Msg
	answer  func(*nats.Msg)
	release func()
}

// answerer answers w, then the requests handed to it, until Stop. A
// request goes to an answerer that waits for one, else to a new one: a
// goroutine started per request would grow its stack on every answer (the
// decision's hashing and encoding run deeper than a new stack), and
// copying stacks cost the admitter more CPU per job than the hand-off. At
// most MaxConcurrentNATS answerers stay: one that finds more ends; idle
// ones hold little, as the garbage collector shrinks their stacks.
func (d *NATSDoor) answerer(w natsWork) {
	for {
		w.answer(w.m)
		w.release()
		<-d.sem
		d.wg.Done()
		if d.answerers.Load() > MaxConcurrentNATS {
			d.answerers.Add(-1)
			return
		}
		select {
		case w = <-d.work:
		case <-d.quit:
			d.answerers.Add(-1)
			return
		}
	}
}

// pendingBytes is a door subscription's buffer in bytes for a bound of
// inflight request bytes: as much again (1 GiB at most, and for a
// configuration built without the defaults).
func pendingBytes(inflight int64) int {
	if inflight <= 0 || inflight > 1<<30 {
		return 1 << 30
	}
	return int(inflight)
}

func (d *NATSDoor) answer(m *nats.Msg) {
	if !d.Access.answers(m) {
		return
	}
	name := strings.TrimPrefix(m.Subject, spillway.SubmitPrefix)
	rep := spillway.SubmitReply{Queue: name}
	who, ok := d.Access.caller(m)
	if !ok {
		rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemUnauthorized, unauthorizedDetail
		d.reply(m, rep)
		return
	}
	// An unknown queue first, whatever else is wrong, as on the HTTP door.
	if d.admitter.Config().Queue(name) == nil {
		rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemNotFound, fmt.Sprintf("no queue %.80q", name)
		d.reply(m, rep)
		return
	}
	get := natsHeaderOf(m.Header).get
	req, bad := requestOf(name, m.Data, get, true)
	if bad != nil {
		rep.Status, rep.Type, rep.Error = spillway.Failed, bad.Type, bad.Detail
		d.reply(m, rep)
		return
	}
	req.Caller = who.id
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	ans, err := d.admitter.Submit(ctx, req)
	if err != nil {
		var e *admit.Error
		rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemInternal, err.Error()
		if errors.As(err, &e) {
			rep.Type, rep.Error, rep.RetryAfterMS = e.Type, e.Detail, retryMS(e.RetryAfter)
			if e.Type == spillway.ProblemUnavailable || e.Type == spillway.ProblemInternal {
				d.logger.Warn("door: submission failed", "queue", name, "err", err)
			}
		}
		d.reply(m, rep)
		return
	}
	d.replyWith(m, ans.Reply, ans.ShadowHeader())
}

func (d *NATSDoor) reply(m *nats.Msg, rep spillway.SubmitReply) { d.replyWith(m, rep, nil) }

// replyWith replies with rep and a Spillway-Shadow header of each of
// shadow's values.
func (d *NATSDoor) replyWith(m *nats.Msg, rep spillway.SubmitReply, shadow []string) {
	var extra nats.Header
	if len(shadow) > 0 {
		extra = nats.Header{spillway.HeaderShadow: shadow}
	}
	replyJSON(d.nc, d.logger, m, rep, rep.Status, extra, "queue", rep.Queue, "id", rep.ID, "status", rep.Status)
}

// replyJSON answers request m with v in JSON and the Spillway-Status
// header of status (none when empty), and extra's headers; a reply that
// cannot be sent is logged with logArgs.
func replyJSON(nc *nats.Conn, log *slog.Logger, m *nats.Msg, v any, status spillway.Status, extra nats.Header, logArgs ...any) {
	b, err := json.Marshal(v)
	if err != nil {
		log.Error("door: encoding a reply", "err", err)
		return
	}
	out := &nats.Msg{Subject: m.Reply, Data: b}
	if status != "" || len(extra) > 0 {
		out.Header = nats.Header{}
		for k, vs := range extra {
			out.Header[k] = vs
		}
		if status != "" {
			out.Header.Set(spillway.HeaderStatus, string(status))
		}
	}
	if err := nc.PublishMsg(out); err != nil {
		log.Warn("door: replying", append(logArgs, "err", err)...)
	}
}

// headerGet looks a NATS header up by name, ignoring case: nats.Header's
// own Get is case-sensitive, and producers spell header names as they like.
func headerGet(h nats.Header, k string) string {
	if h == nil {
		return ""
	}
	if v, ok := h[k]; ok && len(v) > 0 {
		return v[0]
	}
	for name, v := range h {
		if len(v) > 0 && strings.EqualFold(name, k) {
			return v[0]
		}
	}
	return ""
}

// natsHeaders looks a request's headers up as headerGet does, with one
// look at the names first: when every name is in canonical form
// (X-Api-Key, Spillway-Cost), as clients send them, a name asked in
// canonical form is found, or not, by the map alone, and the many names a
// submission asks for and does not carry cost no scan of the headers each.
type natsHeaders struct {
	h         nats.Header
	canonical bool
}

func natsHeaderOf(h nats.Header) natsHeaders {
	for k := range h {
		if !canonicalName(k) {
			return natsHeaders{h: h}
		}
	}
	return natsHeaders{h: h, canonical: true}
}

func (n natsHeaders) get(k string) string {
	if n.canonical && canonicalName(k) {
		if v := n.h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return headerGet(n.h, k)
}

// canonicalName reports whether k is a header name of ASCII letters,
// digits and hyphens in canonical form: each letter upper case at the
// start and after a hyphen, lower case elsewhere. Two such names that
// differ but in case are never both canonical.
func canonicalName(k string) bool {
	if k == "" {
		return false
	}
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '-':
			upper = true
			continue
		case c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z':
			if !upper {
				return false
			}
		case c >= 'a' && c <= 'z':
			if upper {
				return false
			}
		default:
			return false
		}
		upper = false
	}
	return true
}

// AdmitterGroup is the queue group every admitter subscribes in, on every
// subject of the NATS door: each request reaches one admitter.
const AdmitterGroup = "spillway-admitters"
