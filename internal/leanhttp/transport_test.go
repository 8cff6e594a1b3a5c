package leanhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait on the server or the transport.
const wait = 10 * time.Second

// server is an httptest server (real TCP) that counts the connections it
// accepted and the requests it answered, and hands the test each
// connection that went idle and each one closed.
type server struct {
	*httptest.Server
	accepted atomic.Int64
	requests atomic.Int64
	idle     chan net.Conn // the server's side of connections gone idle, the first 100
	closed   chan struct{} // one per connection closed, the first 100
}

// setup starts a server answering with h (nil: echo the request's body)
// and a client over a new Transport.
func setup(t *testing.T, h http.HandlerFunc) (*server, *Transport, *http.Client) {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(b)
		}
	}
	s := &server{idle: make(chan net.Conn, 100), closed: make(chan struct{}, 100)}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
		case http.StateIdle:
			select {
			case s.idle <- c:
			default: // a test that does not look at them
			}
		case http.StateClosed, http.StateHijacked:
			select {
			case s.closed <- struct{}{}:
			default:
			}
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	tr := &Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return s, tr, &http.Client{Transport: tr}
}

// answer is what post read of an answer.
type answer struct {
	status  int
	close   bool // Connection: close
	chunked bool
	body    string
}

// post sends body to url and reads the answer.
func post(ctx context.Context, hc *http.Client, url, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, close: resp.Close, body: string(b)}
	a.chunked = len(resp.TransferEncoding) == 1 && resp.TransferEncoding[0] == "chunked"
	return a, err
}

// mustPost is post that fails the test unless it echoes body.
func mustPost(t *testing.T, hc *http.Client, url, body string) {
	t.Helper()
	a, err := post(t.Context(), hc, url, body)
	if err != nil || a.body != body {
		t.Fatalf("POST %s: %q, %v; want %q", url, a.body, err, body)
	}
}

// get sends a GET to url.
func get(t *testing.T, hc *http.Client, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// next receives from c, or fails the test after wait.
func next[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s within %s", what, wait)
		panic("unreachable")
	}
}

func (t *Transport) idleCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, cs := range t.idle {
		n += len(cs)
	}
	return n
}

// Sequential requests, one after another's answer, use one connection.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	s, tr, hc := setup(t, nil)
	for i := range 20 {
		mustPost(t, hc, s.URL+"/jobs", fmt.Sprintf("job %d", i))
	}
	// A GET and an answer without a body (Content-Length: 0) keep it too.
	resp := get(t, hc, s.URL+"/")
	if resp.Body != http.NoBody {
		t.Errorf("a GET with an empty answer: body %T, want http.NoBody", resp.Body)
	}
	_ = resp.Body.Close()
	if n := s.accepted.Load(); n != 1 || s.requests.Load() != 21 || tr.idleCount() != 1 {
		t.Fatalf("21 sequential requests: %d connections accepted, %d requests, %d idle; want 1, 21, 1", n, s.requests.Load(), tr.idleCount())
	}
}

// A chunked answer is read whole, and its connection is used again.
func TestChunkedAnswer(t *testing.T) {
	t.Parallel()
	s, _, hc := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		for _, part := range []string{"one ", "two ", "three"} {
			_, _ = io.WriteString(w, part)
			w.(http.Flusher).Flush()
		}
	})
	for range 3 {
		a, err := post(t.Context(), hc, s.URL, "")
		if err != nil || a.body != "one two three" || !a.chunked {
			t.Fatalf("chunked answer: %+v %v", a, err)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("3 chunked answers: %d connections accepted, want 1", n)
	}
}

// An answer with Connection: close closes its connection; the next
// request dials.
func TestConnectionClose(t *testing.T) {
	t.Parallel()
	s, tr, hc := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok")
	})
	a, err := post(t.Context(), hc, s.URL+"/close", "")
	if err != nil || a.body != "ok" || !a.close {
		t.Fatalf("an answer with Connection: close: %+v %v", a, err)
	}
	next(t, s.closed, "closed connection")
	if n := tr.idleCount(); n != 0 {
		t.Fatalf("%d idle connections after Connection: close, want 0", n)
	}
	for range 2 {
		if a, err := post(t.Context(), hc, s.URL+"/", ""); err != nil || a.body != "ok" {
			t.Fatalf("after Connection: close: %q %v", a.body, err)
		}
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want 2 (the closed one, then one for both requests)", n)
	}
}

// A connection the server closed while it was idle is found before the
// next request is written to it: that request goes on a new connection.
func TestServerClosedIdle(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			t.Parallel()
			s, tr, hc := setup(t, nil)
			mustPost(t, hc, s.URL, "first")
			closeServerSide(t, s, reset)
			clientSeesClose(t, tr, s)
			mustPost(t, hc, s.URL, "second")
			if n, r := s.accepted.Load(), s.requests.Load(); n != 2 || r != 2 {
				t.Fatalf("%d connections accepted, %d requests; want 2, 2", n, r)
			}
		})
	}
}

// closeServerSide closes the server's side of the connection the last
// request went idle on — with a reset (RST) rather than an end (FIN) if
// reset — and waits until the server is done with it.
func closeServerSide(t *testing.T, s *server, reset bool) {
	t.Helper()
	c := next(t, s.idle, "idle connection")
	if reset {
		if err := c.(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	next(t, s.closed, "closed connection")
}

// Without the peek: a write that fails before its first byte (the server
// reset the connection) is retried once on a new connection; a request
// written whole to a connection the server had ended is not retried — it
// might have been taken.
func TestRetryOnlyWhatWasNotSent(t *testing.T) {
	t.Parallel()
	t.Run("reset: write fails, retried", func(t *testing.T) {
		t.Parallel()
		s, tr, hc := setup(t, nil)
		tr.noPeek = true
		mustPost(t, hc, s.URL, "first")
		closeServerSide(t, s, true)
		clientSeesClose(t, tr, s)
		mustPost(t, hc, s.URL, "second")
		if n, r := s.accepted.Load(), s.requests.Load(); n != 2 || r != 2 {
			t.Fatalf("%d connections accepted, %d requests; want 2, 2", n, r)
		}
	})
	t.Run("end: written, not retried", func(t *testing.T) {
		t.Parallel()
		s, tr, hc := setup(t, nil)
		tr.noPeek = true
		mustPost(t, hc, s.URL, "first")
		closeServerSide(t, s, false)
		clientSeesClose(t, tr, s)
		if a, err := post(t.Context(), hc, s.URL, "second"); err == nil {
			t.Fatalf("a request written to a connection the server ended: %q, want an error", a.body)
		}
		if n, r := s.accepted.Load(), s.requests.Load(); n != 1 || r != 1 {
			t.Fatalf("%d connections accepted, %d requests; want 1, 1 (no retry)", n, r)
		}
		mustPost(t, hc, s.URL, "third")
	})
}

// clientSeesClose waits until the client's side of its one idle
// connection has the server's end or reset, which may arrive after the
// server's close returns.
func clientSeesClose(t *testing.T, tr *Transport, s *server) {
	t.Helper()
	c := tr.take(hostPort(mustURL(t, s.URL)))
	if c == nil {
		t.Fatal("no idle connection")
	}
	for deadline := time.Now().Add(wait); c.open(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server's close did not reach the client's socket")
		}
	}
	tr.put(c)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A request whose context ends before its answer fails with the
// context's error instead of waiting; its connection is not used again.
func TestContextEnds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	got := make(chan struct{}, 10)
	s, tr, hc := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			got <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	})
	t.Cleanup(func() { close(release) })
	mustPost(t, hc, s.URL, "ok") // one idle connection, reused below

	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := post(ctx, hc, s.URL+"/slow", "")
		errc <- err
	}()
	if err := next(t, errc, "answer to a request past its deadline"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past its deadline: %v, want context.DeadlineExceeded", err)
	}
	next(t, got, "slow request at the server")

	ctx, cancel := context.WithCancel(t.Context()) // no deadline
	go func() {
		_, err := post(ctx, hc, s.URL+"/slow", "")
		errc <- err
	}()
	next(t, got, "slow request at the server")
	cancel()
	if err := next(t, errc, "answer to a cancelled request"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request: %v, want context.Canceled", err)
	}
	if n := tr.idleCount(); n != 0 {
		t.Fatalf("%d idle connections after two requests that did not end, want 0", n)
	}
	mustPost(t, hc, s.URL, "ok")
	if n := s.accepted.Load(); n != 3 {
		t.Fatalf("%d connections accepted, want 3 (one per request that did not end, one after)", n)
	}
}

// A body closed before its end closes the connection; closed after it,
// the connection is kept.
func TestBodyClosedEarly(t *testing.T) {
	t.Parallel()
	s, tr, hc := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 100_000))
	})
	resp := get(t, hc, s.URL)
	if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
		t.Error("a read after Close: no error")
	}
	next(t, s.closed, "closed connection")
	resp = get(t, hc, s.URL)
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 100_000 {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	_ = resp.Body.Close()
	if n, idle := s.accepted.Load(), tr.idleCount(); n != 2 || idle != 1 {
		t.Fatalf("%d connections accepted, %d idle; want 2, 1", n, idle)
	}
}

// Concurrent callers each get their own connection and their own answer
// (bodies up to 4.9 kB: some larger than the write buffer); no more than
// MaxIdlePerHost are kept; CloseIdleConnections closes them.
func TestConcurrentCallers(t *testing.T) {
	t.Parallel()
	s, tr, hc := setup(t, nil)
	tr.MaxIdlePerHost = 4
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				body := fmt.Sprintf("caller %d job %d %s", g, i, strings.Repeat("p", g*700))
				if a, err := post(t.Context(), hc, s.URL, body); err != nil || a.body != body {
					errs <- fmt.Errorf("caller %d job %d: %.40q, %w", g, i, a.body, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	idle := tr.idleCount()
	if idle > 4 || idle < 1 {
		t.Fatalf("%d idle connections, want 1 to 4", idle)
	}
	hc.CloseIdleConnections()
	for range idle {
		next(t, s.closed, "closed connection")
	}
	if tr.idleCount() != 0 {
		t.Fatal("idle connections after CloseIdleConnections")
	}
	mustPost(t, hc, s.URL, "after")
}

// https and proxies are refused, with an error that says so.
func TestRefused(t *testing.T) {
	t.Parallel()
	s, _, hc := setup(t, nil)
	_, err := post(t.Context(), hc, strings.Replace(s.URL, "http://", "https://", 1), "x")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "plain http:// only") {
		t.Errorf("https: %v, want ErrUnsupported", err)
	}
	proxy := &http.Client{Transport: &Transport{Proxy: http.ProxyURL(mustURL(t, "http://proxy.example:3128"))}}
	_, err = post(t.Context(), proxy, s.URL, "x")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "proxy.example:3128") {
		t.Errorf("a proxy: %v, want ErrUnsupported naming it", err)
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("the server got %d requests, want 0", n)
	}
}

// An informational answer (103 Early Hints) before the answer is skipped.
func TestInformationalAnswer(t *testing.T) {
	t.Parallel()
	s, _, hc := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "ok")
	})
	for range 2 {
		a, err := post(t.Context(), hc, s.URL, "")
		if err != nil || a.body != "ok" || a.status != http.StatusAccepted {
			t.Fatalf("after 103 Early Hints: %+v %v", a, err)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections accepted, want 1", n)
	}
}
