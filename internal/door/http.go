// Package door holds the admitter's two front doors (docs/design.md#doors): HTTP and
// NATS request-reply. Both hand submissions to one admit.Admitter and
// answer with the same spillway.SubmitReply.
package door

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/api"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// HTTPOptions are the HTTP door's parts. Admitter and JS are required.
type HTTPOptions struct {
	Admitter *admit.Admitter
	JS       jetstream.JetStream
	// Status serves GET /v1/jobs/{id}; nil answers 404.
	Status *jobstatus.Store
	// Inspector, if set, serves GET /v1/queues from its shared snapshot
	// of every queue (docs/design.md#many-queues); nil reads each queue in
	// turn.
	Inspector *admin.Inspector
	// Keys authenticates submissions and API reads; nil or empty: open.
	Keys *APIKeys
	// AdminKeys are the keys allowed on the admin endpoints (pause and
	// resume, admin.go); nil or empty: those answer 403 to everyone.
	AdminKeys *APIKeys
	// Limits is the runtime overrides' bucket (overrides.Open), for the
	// limits and concurrency endpoints (limits.go,
	// concurrencyoverrides.go); nil: their writes answer 503.
	Limits jetstream.KeyValue
	// Ready reports whether the admitter can take jobs (/readyz).
	Ready func() error
	// Metrics serves /metrics; UI serves /ui. Either may be nil.
	Metrics http.Handler
	UI      http.Handler
	// Registerer takes the door's metrics (inflight.go); nil: none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// SubmitTimeout bounds one submission over either door (NATSDoor.Timeout's
// default): a store whose PubAck never comes — a JetStream stream's leader
// cut off by a partition — is answered unavailable (503, Retry-After) when
// it runs out, not held until the client gives up.
const SubmitTimeout = 10 * time.Second

// NewHTTP returns the HTTP door's handler.
func NewHTTP(o HTTPOptions) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &httpDoor{o: o, inflight: newInflight(o.Registerer)}
	h.weightChanges = newWeightChanges(o.Registerer)
	routes := []route{
		{http.MethodPost, "/v1/queues/{queue}/jobs", h.submit},
		{http.MethodPost, "/v1/queues/{queue}/jobs:batch", h.submitBatch}, // batch.go
		{http.MethodGet, "/v1/jobs/{id}", h.auth(h.job)},
		{http.MethodDelete, "/v1/jobs/{id}", h.auth(h.cancel)}, // cancel.go
		{http.MethodGet, "/v1/queues", h.auth(ignoreCaller(h.queues))},
		{http.MethodGet, "/v1/queues/{queue}", h.auth(ignoreCaller(h.queueInfo))},
		{http.MethodGet, "/v1/queues/{queue}/keys", h.tenantsAdmin(h.queueKeys)}, // backlogkeys.go: every tenant's keys
		{http.MethodPost, "/v1/queues/{queue}/pause", h.admin(h.pause)},          // admin.go
		{http.MethodPost, "/v1/queues/{queue}/resume", h.admin(h.resume)},        // admin.go
		{http.MethodGet, "/v1/queues/{queue}/limits", h.admin(h.limits)},         // limits.go
		{http.MethodGet, limitPath, h.admin(keyOverride(h.tierOf))},              // overrides.go: one key's override of a tier or an entry
		{http.MethodPut, limitPath, h.admin(h.setKeyOverride(h.tierOf))},
		{http.MethodDelete, limitPath, h.admin(h.deleteKeyOverride(h.tierOf))},
		{http.MethodGet, "/v1/queues/{queue}/concurrency", h.admin(h.concurrencyList)}, // concurrencyoverrides.go
		{http.MethodGet, concurrencyPath, h.admin(keyOverride(h.concurrencyOf))},
		{http.MethodPut, concurrencyPath, h.admin(h.setKeyOverride(h.concurrencyOf))},
		{http.MethodDelete, concurrencyPath, h.admin(h.deleteKeyOverride(h.concurrencyOf))},
		{http.MethodGet, "/livez", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		}},
		{http.MethodGet, "/readyz", h.readyz},
		{http.MethodGet, "/openapi.json", contract},
		{http.MethodGet, "/openapi.yaml", contract},
		// The weights endpoints (weights.go).
		{http.MethodGet, "/v1/queues/{queue}/weights", h.admin(h.weights)},
		{http.MethodGet, weightPath, h.admin(h.keyWeight)},
		{http.MethodPut, weightPath, h.admin(h.setWeight)},
		{http.MethodDelete, weightPath, h.admin(h.deleteWeight)},
	}
	if o.Metrics != nil {
		routes = append(routes, route{http.MethodGet, "/metrics", o.Metrics.ServeHTTP})
	}
	if o.UI != nil {
		routes = append(routes, route{http.MethodGet, "/ui", o.UI.ServeHTTP}, route{http.MethodGet, "/ui/", o.UI.ServeHTTP})
	}
	return h.writeDeadline(newRouter(routes))
}

// writeDeadline bounds the writing of each answer by http.write_timeout,
// from its first byte: a client that pipelines requests and never reads
// the answers is disconnected then, instead of holding a connection and
// its buffers for as long as it likes. No endpoint streams an answer, so
// one deadline fits them all. A configuration built without the defaults
// (WriteTimeout 0) sets none.
//
// The server clears a connection's write deadline after each answer, so
// a request starts with none, and the deadline is set once per answer,
// at its first byte: setting it moves the connection's timer, which is
// a cost per request. Two writes can come before that byte, and each is
// bounded too: a request that expects 100-continue gets a deadline from
// its start, for the server's interim answer, and a handler that returns
// without writing gets one before the server writes its answer.
func (h *httpDoor) writeDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := h.cfg().HTTP.WriteTimeout
		if d <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		dw := &deadlineWriter{ResponseWriter: w, d: d}
		// The server's own writer has SetWriteDeadline; a wrapper (a test's)
		// may not, and is reached through http.ResponseController.
		if c, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
			dw.conn = c
		} else {
			dw.conn = http.NewResponseController(w)
		}
		if r.Header.Get("Expect") != "" { // the server answers 100 Continue as the body is read
			_ = dw.conn.SetWriteDeadline(time.Now().Add(d))
		}
		next.ServeHTTP(dw, r)
		dw.start()
	})
}

// deadlineWriter sets its connection's write deadline at the answer's
// first byte, after the request's body was read and its jobs decided.
type deadlineWriter struct {
	http.ResponseWriter
	conn    interface{ SetWriteDeadline(time.Time) error }
	d       time.Duration
	started bool
}

func (w *deadlineWriter) start() {
	if !w.started {
		w.started = true
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.d))
	}
}

func (w *deadlineWriter) WriteHeader(status int) {
	w.start()
	w.ResponseWriter.WriteHeader(status)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serverWriter is the server's own writer under w's wrappers: the one
// http.MaxBytesReader tells, when a body runs over its limit, to close
// the connection after the answer rather than read the rest of the body
// (which may never end).
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// route is one entry of the door's route table.
type route struct {
	method, path string
	h            http.HandlerFunc
}

// newRouter serves routes. A served path asked with another method is 405
// with Allow, and any other request 404, both as problem documents (the
// mux's own answers are plain text).
func newRouter(routes []route) http.Handler {
	mux := http.NewServeMux()
	paths := http.NewServeMux() // a served path, whatever the method
	allow := map[string][]string{}
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, rt.h)
		if allow[rt.path] == nil {
			paths.Handle(rt.path, http.NotFoundHandler())
		}
		allow[rt.path] = append(allow[rt.path], rt.method)
		if rt.method == http.MethodGet { // a GET route serves HEAD too
			allow[rt.path] = append(allow[rt.path], http.MethodHead)
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := paths.Handler(r); len(allow[pattern]) > 0 {
			methods := strings.Join(allow[pattern], ", ")
			w.Header().Set("Allow", methods)
			problem(w, r, http.StatusMethodNotAllowed, spillway.Problem{Type: spillway.ProblemMethodNotAllowed, Title: "Method not allowed",
				Detail: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, methods)})
			return
		}
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Not found",
			Detail: fmt.Sprintf("no route for %s %s; see GET /v1/queues", r.Method, r.URL.Path)})
	})
	return mux
}

type httpDoor struct {
	o        HTTPOptions
	keys     keysCache // GET /v1/queues/{queue}/keys (backlogkeys.go)
	inflight *inflight // http.max_inflight_bytes (inflight.go)
	// weightChanges counts the runtime weight rules set and removed
	// (weights.go).
	weightChanges *prometheus.CounterVec
}

func (h *httpDoor) cfg() *config.Config { return h.o.Admitter.Config() }

// auth authenticates a request (a submit or an admin key, or none
// without submit keys) and hands next its caller.
func (h *httpDoor) auth(next func(w http.ResponseWriter, r *http.Request, who caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ok := h.httpCaller(r)
		if !ok {
			unauthorized(w, r)
			return
		}
		next(w, r, who)
	}
}

// ignoreCaller is next, for auth, which does not depend on the caller.
func ignoreCaller(next http.HandlerFunc) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, _ caller) { next(w, r) }
}

// tenantsAdmin guards an endpoint that shows every tenant's traffic: an
// admin endpoint, except on an admitter with no keys at all, whose one
// anonymous tenant already sees every job (single-tenant mode, as
// `admitter --dev` runs without a configuration).
func (h *httpDoor) tenantsAdmin(next http.HandlerFunc) http.HandlerFunc {
	admin := h.admin(func(w http.ResponseWriter, r *http.Request, _ string) { next(w, r) })
	return func(w http.ResponseWriter, r *http.Request) {
		if h.o.Keys.empty() && h.o.AdminKeys.empty() {
			next(w, r)
			return
		}
		admin(w, r)
	}
}

func unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="spillway"`)
	problem(w, r, http.StatusUnauthorized, spillway.Problem{Type: spillway.ProblemUnauthorized, Title: "Unauthorized",
		Detail: unauthorizedDetail})
}

// submission checks a submission's API key and queue, answering 401 or
// 404 itself (ok false), and returns its caller.
func (h *httpDoor) submission(w http.ResponseWriter, r *http.Request) (cfg *config.Config, name string, who caller, ok bool) {
	who, ok = h.httpCaller(r)
	if !ok {
		unauthorized(w, r)
		return nil, "", caller{}, false
	}
	cfg, name = h.cfg(), r.PathValue("queue")
	if cfg.Queue(name) == nil {
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown queue",
			Detail: fmt.Sprintf("no queue %.80q; GET /v1/queues lists them", name)})
		return nil, "", caller{}, false
	}
	return cfg, name, who, true
}

func (h *httpDoor) submit(w http.ResponseWriter, r *http.Request) {
	cfg, name, who, ok := h.submission(w, r)
	if !ok {
		return
	}
	body, release, ok := h.readSubmission(w, r, cfg.HTTP.MaxBodyBytes, tooLarge)
	if !ok {
		return
	}
	defer release()
	req, bad := requestOf(name, body, r.Header.Get, false)
	if bad != nil && scheduleHeader(bad.Field) {
		// Answered as Submit's own bad requests are.
		h.submitError(w, r, name, bad)
		return
	}
	if bad != nil {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: bad.Type, Title: titleOf(bad.Type), Field: bad.Field, Detail: bad.Detail})
		return
	}
	req.Peer, req.Caller = clientIP(r, cfg.HTTP.TrustedProxies), who.id
	ctx, cancel := context.WithTimeout(r.Context(), SubmitTimeout)
	defer cancel()
	ans, err := h.o.Admitter.Submit(ctx, req)
	if err != nil {
		h.submitError(w, r, name, err)
		return
	}
	hdr := answerHeaders{buf: make([]byte, 0, 384)} // the header values, then the body (writeSubmitReply)
	rateLimitHeaders(&hdr, ans.RateLimit)
	for _, v := range ans.ShadowHeader() {
		w.Header().Add(spillway.HeaderShadow, v)
	}
	rep := ans.Reply
	switch rep.Status {
	case spillway.Admitted, spillway.Queued:
		writeSubmitReply(w, &hdr, &rep)
	default:
		hdr.set(w.Header())
		w.Header().Set(spillway.HeaderStatus, string(spillway.Rejected))
		setRetryAfter(w.Header(), rep.RetryAfterMS)
		title := "Rate limited"
		detail := "the key's limit is full"
		switch rep.Type {
		case spillway.ProblemQueueFull:
			title, detail = "Backlog full", "the queue's backlog is full"
		case spillway.ProblemKeyFull:
			title, detail = "Backlog full for this key", "this key's share of the backlog is full"
		case spillway.ProblemWaitTooLong:
			title, detail = "Wait too long", "the job would start later than its "+spillway.HeaderMaxWait+" allows; nothing was taken"
		}
		if rep.RetryAfterMS > 0 {
			detail += fmt.Sprintf("; retry after %s", time.Duration(rep.RetryAfterMS)*time.Millisecond)
		}
		problem(w, r, http.StatusTooManyRequests, spillway.Problem{Type: rep.Type, Title: title, Detail: detail,
			Queue: name, RetryAfterMS: rep.RetryAfterMS})
	}
}

func (h *httpDoor) submitError(w http.ResponseWriter, r *http.Request, q string, err error) {
	var e *admit.Error
	if !errors.As(err, &e) {
		h.o.Logger.Error("door: submission failed", "queue", q, "err", err)
		problem(w, r, http.StatusInternalServerError, spillway.Problem{Type: spillway.ProblemInternal, Title: "Internal error"})
		return
	}
	// No rate-limit headers: no tier decided an error (rateLimitHeaders).
	status := statusOf(e.Type)
	p := spillway.Problem{Type: e.Type, Title: http.StatusText(status), Detail: e.Detail, Field: e.Field, Queue: q}
	if status >= 500 {
		h.o.Logger.Warn("door: submission failed", "queue", q, "err", err)
		p.RetryAfterMS = retryMS(e.RetryAfter)
		setRetryAfter(w.Header(), p.RetryAfterMS)
	}
	problem(w, r, status, p)
}

// statusOf maps a problem type to its HTTP status (spillway.StatusOf).
func statusOf(t string) int { return spillway.StatusOf(t) }

func retryMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// readBody reads a request's body of at most limit bytes. A larger one is
// answered with tooBig, an unreadable one with 400; ok is false then. A
// body of known length is read into one buffer of its size: no copies
// left behind by a growing buffer. The server reads no more than a
// Content-Length says, so only a body of unknown length (chunked) needs
// http.MaxBytesReader to hold it to limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, tooBig func(http.ResponseWriter, *http.Request, int64)) (body []byte, ok bool) {
	if r.ContentLength > limit {
		tooBig(w, r, limit)
		return nil, false
	}
	var err error
	if r.ContentLength >= 0 {
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(serverWriter(w), r.Body, limit))
	}
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			tooBig(w, r, limit)
			return nil, false
		}
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Unreadable body", Detail: err.Error()})
		return nil, false
	}
	return body, true
}

func tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	problem(w, r, http.StatusRequestEntityTooLarge, spillway.Problem{Type: spillway.ProblemTooLarge, Title: "Payload too large",
		Detail: fmt.Sprintf("the body is larger than http.max_body_bytes (%d bytes)", limit)})
}

// clientIP is the peer's address, or, when the peer is a trusted proxy,
// the rightmost X-Forwarded-For address that is not a trusted proxy. An
// untrusted peer's X-Forwarded-For is ignored.
func clientIP(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if peer.Is4() && !isTrusted(peer, trusted) {
		return host // as peer.String() spells it: ParseAddr takes IPv4 in that form only
	}
	peer = peer.Unmap()
	if !isTrusted(peer, trusted) {
		return peer.String()
	}
	xff := r.Header.Values("X-Forwarded-For")
	for i := len(xff) - 1; i >= 0; i-- {
		parts := strings.Split(xff[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return peer.String() // garbage from the proxy chain: trust nothing beyond it
			}
			a = a.Unmap()
			if !isTrusted(a, trusted) {
				return a.String()
			}
			peer = a
		}
	}
	return peer.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// rateLimitHeaders adds to a what an answer says about the limits:
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11,
// each policy named by its tier's name) and X-RateLimit-*. Answers the
// tiers did not decide carry none: errors (bad cost or key, unknown
// queue, the store down with failure mode closed, JetStream not storing
// the job) were decided by nothing that has a remaining quota to tell.
// Under failure mode open nothing counts the job, so the answer lists
// the policies in force and says nothing of what remains.
func rateLimitHeaders(a *answerHeaders, rl *admit.RateLimit) {
	if rl == nil || len(rl.Policies) == 0 {
		return
	}
	for i, p := range rl.Policies {
		if i > 0 {
			a.buf = append(a.buf, ", "...)
		}
		a.buf = strconv.AppendQuote(a.buf, p.Name)
		a.buf = append(a.buf, ";q="...)
		a.buf = strconv.AppendInt(a.buf, p.Quota, 10)
		a.buf = append(a.buf, ";w="...)
		a.buf = strconv.AppendInt(a.buf, ceilSeconds(p.Window), 10)
	}
	a.add(headerRateLimitPolicy)
	if !rl.Counted {
		return
	}
	p := rl.Policies[0]
	reset := ceilSeconds(rl.Reset)
	a.buf = strconv.AppendQuote(a.buf, p.Name)
	a.buf = append(a.buf, ";r="...)
	a.buf = strconv.AppendInt(a.buf, rl.Remaining, 10)
	a.buf = append(a.buf, ";t="...)
	a.buf = strconv.AppendInt(a.buf, reset, 10)
	a.add(headerRateLimit)
	a.buf = strconv.AppendInt(a.buf, p.Quota, 10)
	a.add(headerXRateLimitLimit)
	a.buf = strconv.AppendInt(a.buf, rl.Remaining, 10)
	a.add(headerXRateLimitRemaining)
	a.buf = strconv.AppendInt(a.buf, reset, 10)
	a.add(headerXRateLimitReset)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// setRetryAfter sets Retry-After in whole seconds, rounded up (at least 1).
func setRetryAfter(h http.Header, ms int64) {
	if ms == 0 {
		return
	}
	if ms < 0 { // never: the job is larger than the limit
		return
	}
	h.Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
}

func (h *httpDoor) queues(w http.ResponseWriter, r *http.Request) {
	cfg := h.cfg()
	list := spillway.QueueList{Queues: make([]spillway.QueueInfo, 0, len(cfg.Queues))}
	if h.o.Inspector != nil {
		cfgs := make([]queue.Config, len(cfg.Queues))
		for i := range cfg.Queues {
			cfgs[i] = cfg.Queues[i].Backlog
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		snap, err := h.o.Inspector.Snapshot(ctx, cfgs)
		if err != nil {
			h.unavailable(w, r, "reading the queues", err)
			return
		}
		for i := range cfg.Queues {
			q := &cfg.Queues[i]
			in, ok := snap.Infos[q.Name]
			if !ok {
				h.unavailable(w, r, "reading queue "+q.Name, snap.Errs[q.Name])
				return
			}
			list.Queues = append(list.Queues, queueInfoOf(q, in, snap.Leak[q.Name], snap.Pause[q.Name]))
		}
		writeJSON(w, http.StatusOK, "application/json", list)
		return
	}
	for i := range cfg.Queues {
		qi, err := QueueInfo(r.Context(), h.o.JS, &cfg.Queues[i])
		if err != nil {
			h.unavailable(w, r, "reading queue "+cfg.Queues[i].Name, err)
			return
		}
		list.Queues = append(list.Queues, qi)
	}
	writeJSON(w, http.StatusOK, "application/json", list)
}

func (h *httpDoor) queueInfo(w http.ResponseWriter, r *http.Request) {
	q := h.cfg().Queue(r.PathValue("queue"))
	if q == nil {
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown queue",
			Detail: fmt.Sprintf("no queue %.80q; GET /v1/queues lists them", r.PathValue("queue"))})
		return
	}
	qi, err := QueueInfo(r.Context(), h.o.JS, q)
	if err != nil {
		h.unavailable(w, r, "reading queue "+q.Name, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", qi)
}

// QueueInfo reads one queue's state (admin.Inspect) as the API shows it.
func QueueInfo(ctx context.Context, js jetstream.JetStream, q *config.Queue) (spillway.QueueInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in, err := admin.Inspect(ctx, js, q.Backlog)
	if err != nil {
		return spillway.QueueInfo{}, err
	}
	st, err := leakState(ctx, js, q.Name)
	if err != nil {
		return spillway.QueueInfo{}, err
	}
	ps, err := pace.ReadPause(ctx, js, q.Name)
	if err != nil {
		return spillway.QueueInfo{}, err
	}
	return queueInfoOf(q, in, st, ps), nil
}

// queueInfoOf is queue q's state as the API shows it.
func queueInfoOf(q *config.Queue, in admin.Info, st pace.LeakState, ps pace.PauseState) spillway.QueueInfo {
	leak := 0.0
	if in.LeakRate.Count > 0 {
		leak = float64(in.LeakRate.Count) / in.LeakRate.Per.Seconds()
	}
	now := time.Now()
	var paused int64
	if st.PausedUntil.After(now) {
		paused = max(1, st.PausedUntil.Sub(now).Milliseconds())
	}
	qi := spillway.QueueInfo{
		LeakRateCurrent: float64(st.Rate(now, in.LeakRate, q.Backlog.Adaptive)) / 1000, LeakPausedMS: paused,
		Name: q.Name, Ready: in.Ready, ReadyCapacity: in.ReadyCapacity, Depth: in.Backlog, Capacity: in.Capacity, PerKeyCapacity: in.PerKeyCapacity,
		Fill: in.Fill, Dead: in.Dead, LeakRate: in.LeakRate.String(), LeakPerSecond: leak,
		InFlight: in.InFlight, MaxAckPending: in.MaxAckPending,
		OldestAgeMS: in.OldestAge.Milliseconds(), EstimatedDrainMS: in.EstimatedDrain.Milliseconds(),
		BacklogPullers: in.BacklogPullers, ReadyPullers: in.ReadyPullers,
	}
	if ps.Paused {
		at := ps.At
		qi.Paused, qi.PausedAt, qi.PausedBy, qi.PauseReason = true, &at, ps.By, ps.Reason
	}
	return qi
}

// leakState reads a queue's pushback state, which the workers share in
// the pacers' bucket; before any worker made the bucket, there is none.
func leakState(ctx context.Context, js jetstream.JetStream, name string) (pace.LeakState, error) {
	kv, err := js.KeyValue(ctx, pace.PacerBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return pace.LeakState{}, nil
	}
	if err != nil {
		return pace.LeakState{}, fmt.Errorf("pacer bucket %s: %w", pace.PacerBucket, err)
	}
	return pace.ReadLeakState(ctx, kv, name)
}

func (h *httpDoor) readyz(w http.ResponseWriter, r *http.Request) {
	if h.o.Ready != nil {
		if err := h.o.Ready(); err != nil {
			w.Header().Set("Retry-After", "1")
			problem(w, r, http.StatusServiceUnavailable, spillway.Problem{Type: spillway.ProblemUnavailable, Title: "Not ready", Detail: err.Error()})
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ready\n")
}

// contract serves the HTTP API's OpenAPI document, open to all: in JSON
// at /openapi.json, as it is kept (YAML) at /openapi.yaml.
func contract(w http.ResponseWriter, r *http.Request) {
	body, ct := api.OpenAPIYAML(), "application/yaml"
	if r.URL.Path == "/openapi.json" {
		var err error
		if body, err = api.OpenAPIJSON(); err != nil {
			problem(w, r, http.StatusInternalServerError, spillway.Problem{Type: spillway.ProblemInternal, Title: "Internal error", Detail: err.Error()})
			return
		}
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func (h *httpDoor) unavailable(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.o.Logger.Warn("door: "+what, "err", err)
	w.Header().Set("Retry-After", "1")
	problem(w, r, http.StatusServiceUnavailable, spillway.Problem{Type: spillway.ProblemUnavailable, Title: "Unavailable",
		Detail: what + ": " + err.Error()})
}

func problem(w http.ResponseWriter, r *http.Request, status int, p spillway.Problem) {
	p.Status = status
	if p.Instance == "" {
		p.Instance = r.URL.Path
	}
	writeJSON(w, status, spillway.ProblemContentType, p)
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// requestKey is the key r carries, as Authorization: Bearer KEY or
// X-Api-Key; "" if none.
func requestKey(r *http.Request) string {
	key := r.Header.Get("X-Api-Key")
	// The scheme is a case-insensitive token (RFC 9110 §11.1).
	if a := r.Header.Get("Authorization"); len(a) >= len("Bearer ") && strings.EqualFold(a[:len("Bearer ")], "Bearer ") {
		key = a[len("Bearer "):]
	}
	return key
}

// KeyFingerprint names a key without telling it: "sha256:" and the first
// 12 hex digits of its SHA-256, as logs and the pause state show it.
func KeyFingerprint(key string) string {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("sha256:%x", sum[:6])
}
