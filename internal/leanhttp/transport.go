// Package leanhttp is an http.RoundTripper for load generators: plain
// HTTP/1.1 with keep-alive to one or a few hosts, each exchange done on the
// caller's goroutine.
//
// # Why
//
// net/http's Transport gives every connection a reading and a writing
// goroutine and hands each request and answer between them and the caller
// over channels. On a machine whose cores a load generator shares with the
// servers it loads, that costs the generator more CPU per request than the
// NATS client costs per message, so comparing the two doors' throughput
// measures the clients as much as the server (docs/performance.md). This
// transport does what wrk or h2load do: write the request, read the answer,
// on the goroutine that asked.
//
// # How
//
// Each host (host:port) has a pool of idle connections, the last given back
// taken first; each connection has its own bufio.Reader and bufio.Writer.
// RoundTrip takes an idle connection (checking with a non-blocking peek that
// the server has not closed it meanwhile) or dials one, sets the
// connection's deadline from the request context's, writes the request and
// flushes it (one write for a request that fits the 4 KiB buffer), and reads
// the answer's head with http.ReadResponse. The answer's body gives the
// connection back to the pool when it is read to its end — unless the
// server or the request asked to close, or the context ended — and closes it
// otherwise, as it does when the body is closed before its end. A context
// that ends before its deadline (cancelled) is noticed through
// context.AfterFunc, which starts a goroutine only when it fires.
//
// # What it does not do
//
// No TLS, no proxies (a proxy the Proxy function chooses is an error rather
// than silently bypassed), no HTTP/2, no compression (it does not ask for
// gzip as net/http's Transport does), no 100-continue. Use net/http's
// Transport for any of those.
//
// With an http.Client, leave Client.Timeout zero and bound requests by
// their context: with a transport net/http does not know, Client.Timeout
// costs a goroutine and a timer per request.
package leanhttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxIdlePerHost is Transport.MaxIdlePerHost's default.
const DefaultMaxIdlePerHost = 64

// ErrUnsupported is wrapped by the error of a request this transport does
// not send: https, or one that would go through a proxy.
var ErrUnsupported = errors.New("leanhttp: unsupported request")

// Transport is a lean http.RoundTripper (see the package's documentation).
// Its zero value is ready to use; it is safe for concurrent use.
type Transport struct {
	// MaxIdlePerHost is how many idle connections are kept for each host
	// (default DefaultMaxIdlePerHost); a connection given back beyond it
	// is closed. A load generator sets it to its number of callers.
	MaxIdlePerHost int
	// Proxy says, as net/http's Transport.Proxy, which proxy a request
	// would go through (default http.ProxyFromEnvironment, which never
	// chooses one for a loopback address). This transport uses none: a
	// request for which one is chosen fails, wrapping ErrUnsupported,
	// rather than going around it. It is asked once per dial.
	Proxy func(*http.Request) (*url.URL, error)

	mu   sync.Mutex
	idle map[string][]*conn // by host:port; the last given back at the end

	// noPeek skips the check of an idle connection before its reuse, so
	// that tests can reach the retry after a failed write.
	noPeek bool
}

// RoundTrip sends req and reads its answer's head on the caller's
// goroutine. The answer's body must be read to its end, or closed, for its
// connection to be used again or closed.
//
// Retried: a request none of whose bytes reached the connection (the write
// failed before the first byte: the server had closed, with a reset, an
// idle connection the peek saw as open), once, on a freshly dialed
// connection, when its body can be had again (Request.GetBody; no body
// counts). Never retried: a request some of whose bytes were written,
// whatever happened next — the server may have taken it, and a submission
// is not idempotent.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	u := req.URL
	switch {
	case u == nil:
		closeBody(req)
		return nil, errors.New("leanhttp: a request without a URL")
	case u.Scheme != "http":
		closeBody(req)
		return nil, fmt.Errorf("%w: %s://%s: plain http:// only (a benchmark's transport; net/http's Transport speaks TLS)", ErrUnsupported, u.Scheme, u.Host)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("leanhttp: %w", err)
	}
	addr := hostPort(u)
	fresh := false // dial, do not take an idle connection
	for {
		c, reused, err := t.get(ctx, req, addr, fresh)
		if err != nil {
			closeBody(req)
			return nil, withContext(ctx, err)
		}
		resp, wrote, err := c.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		c.close()
		if wrote || !reused || fresh || ctx.Err() != nil || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			return nil, withContext(ctx, err)
		}
		// The retry: nothing of req was sent, and its body can be had again.
		if req, err = rewind(req); err != nil {
			return nil, err
		}
		fresh = true
	}
}

// rewind is req with a new body from GetBody, to be written again.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("leanhttp: the request's body for a retry: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = b
	return r, nil
}

// CloseIdleConnections closes the idle connections. Connections in use
// are kept: they go back to the pool when their answers are read.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.close()
		}
	}
}

// get takes an idle connection to addr that is still open (reused) or,
// when there is none or fresh is set, dials one.
func (t *Transport) get(ctx context.Context, req *http.Request, addr string, fresh bool) (c *conn, reused bool, err error) {
	for !fresh {
		if c = t.take(addr); c == nil {
			break
		}
		c.setDeadline(ctx)
		if t.noPeek || c.open() {
			return c, true, nil
		}
		c.close()
	}
	proxy := t.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	switch p, err := proxy(req); {
	case err != nil:
		return nil, false, fmt.Errorf("%w: %s: the proxy setting: %w", ErrUnsupported, addr, err)
	case p != nil:
		return nil, false, fmt.Errorf("%w: %s would go through the proxy %s, and this transport uses none (unset HTTP_PROXY, or name the host in NO_PROXY)", ErrUnsupported, addr, p.Redacted())
	}
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("leanhttp: %w", err)
	}
	c = newConn(nc, addr, t)
	c.setDeadline(ctx)
	return c, false, nil
}

// take pops the connection to addr given back last, or nil.
func (t *Transport) take(addr string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.idle[addr]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	cs[len(cs)-1] = nil
	t.idle[addr] = cs[:len(cs)-1]
	return c
}

// put keeps c for the next request to its host, or closes it when the
// host has MaxIdlePerHost idle connections already.
func (t *Transport) put(c *conn) {
	limit := t.MaxIdlePerHost
	if limit <= 0 {
		limit = DefaultMaxIdlePerHost
	}
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	cs := t.idle[c.addr]
	if len(cs) >= limit {
		t.mu.Unlock()
		c.close()
		return
	}
	t.idle[c.addr] = append(cs, c)
	t.mu.Unlock()
}

// conn is one connection with its buffers.
type conn struct {
	t        *Transport
	addr     string
	nc       net.Conn
	cw       countingWriter // under bw: the bytes the connection took
	br       *bufio.Reader
	bw       *bufio.Writer
	deadline bool // a deadline is set on nc
	peeker        // the check that the server has not closed it
}

func newConn(nc net.Conn, addr string, t *Transport) *conn {
	c := &conn{t: t, addr: addr, nc: nc}
	c.cw.w = nc
	c.br = bufio.NewReader(nc)
	c.bw = bufio.NewWriter(&c.cw)
	c.setup(nc)
	return c
}

func (c *conn) close() { _ = c.nc.Close() }

// setDeadline puts ctx's deadline on the connection, or clears the last
// one when ctx has none.
func (c *conn) setDeadline(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(d)
		c.deadline = true
	} else if c.deadline {
		_ = c.nc.SetDeadline(time.Time{})
		c.deadline = false
	}
}

// longAgo is a deadline in the past: it wakes a blocked read or write.
var longAgo = time.Unix(1, 0)

// roundTrip writes req and reads the answer's head. wrote says whether
// any of req's bytes reached the connection, when err is not nil.
func (c *conn) roundTrip(ctx context.Context, req *http.Request) (_ *http.Response, wrote bool, err error) {
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(longAgo) })
	}
	c.cw.n = 0
	if err = req.Write(c.bw); err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		if stop != nil {
			stop()
		}
		return nil, c.cw.n > 0, fmt.Errorf("leanhttp: writing the request: %w", err)
	}
	resp, err := http.ReadResponse(c.br, req)
	// An informational answer (100 Continue, 103 Early Hints) comes before
	// the answer.
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		if stop != nil {
			stop()
		}
		return nil, true, fmt.Errorf("leanhttp: reading the answer: %w", err)
	}
	reuse := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	if resp.Body == http.NoBody {
		c.release(stop, reuse)
		return resp, true, nil
	}
	resp.Body = &body{rc: resp.Body, c: c, ctx: ctx, stop: stop, reuse: reuse}
	return resp, true, nil
}

// release gives c back to the pool when reuse is set, the context did not
// end (its deadline would be on the connection) and the server sent
// nothing more; it closes c otherwise.
func (c *conn) release(stop func() bool, reuse bool) {
	if stop != nil && !stop() {
		reuse = false
	}
	if reuse && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.close()
}

// body is an answer's body: at its end it releases the connection.
type body struct {
	rc    io.ReadCloser // http.ReadResponse's body
	c     *conn
	ctx   context.Context
	stop  func() bool
	reuse bool
	eof   bool        // read to its end
	done  atomic.Bool // the connection was released or closed
}

var errClosedBody = errors.New("leanhttp: read on a closed answer body")

func (b *body) Read(p []byte) (int, error) {
	switch {
	case b.eof:
		return 0, io.EOF
	case b.done.Load():
		return 0, errClosedBody
	}
	n, err := b.rc.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
		b.finish(true)
		return n, io.EOF
	case err != nil:
		b.finish(false)
		return n, withContext(b.ctx, fmt.Errorf("leanhttp: reading the answer's body: %w", err))
	}
	return n, nil
}

// Close closes the connection unless the body was read to its end: the
// rest of the answer is not read (http.ReadResponse's body would read it,
// as long as it takes).
func (b *body) Close() error {
	b.finish(false)
	return nil
}

func (b *body) finish(atEOF bool) {
	if b.done.CompareAndSwap(false, true) {
		b.c.release(b.stop, atEOF && b.reuse)
	}
}

// countingWriter counts the bytes its writer took.
type countingWriter struct {
	w io.Writer
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.n += int64(n)
	return n, err
}

// withContext adds ctx's error to err when ctx ended, so that a timeout
// or a cancellation is told as such rather than as the connection's
// deadline it set.
func withContext(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline, set from ctx's, may fire before ctx's.
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}

// hostPort is u's host with its port, 80 when it has none.
func hostPort(u *url.URL) string {
	h := u.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && i > strings.LastIndexByte(h, ']') {
		return h
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
