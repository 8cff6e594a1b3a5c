package handler_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

const testID = "01890a5d-ac96-774b-bcce-b302099a8057"

func testJob() *queue.Job {
	return &queue.Job{
		ID: testID, Queue: "email", Key: "tenant-42", Cost: 1, Attempt: 3,
		Payload: []byte("hello, downstream"),
		Header: nats.Header{
			"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			"tracestate":  {"vendor=x"},
			"X-Api-Key":   {"secret-key-of-the-tier"}, // what a tier keyed on: not forwarded
		},
	}
}

// received is one request as the test server saw it.
type received struct {
	method string
	header http.Header
	body   []byte
}

// capture starts a server that records each request and answers with
// answer (nil: 204).
func capture(t *testing.T, answer http.HandlerFunc) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: reading body: %v", err)
		}
		got <- received{method: r.Method, header: r.Header.Clone(), body: body}
		if answer == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func mustHTTP(t *testing.T, cfg handler.HTTPConfig, client *http.Client) worker.Handler {
	t.Helper()
	h, err := handler.HTTP(cfg, client)
	if err != nil {
		t.Fatalf("HTTP(%+v): %v", cfg, err)
	}
	return h
}

func TestHTTPSendsPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, nil)
	h := mustHTTP(t, handler.HTTPConfig{URL: srv.URL + "/send", Headers: map[string]string{"authorization": "Bearer abc"}}, nil)
	if err := h(t.Context(), testJob()); err != nil {
		t.Fatalf("handler: %v", err)
	}
	r := <-got
	if r.method != http.MethodPost || string(r.body) != "hello, downstream" {
		t.Errorf("server got %s %q, want POST %q", r.method, r.body, "hello, downstream")
	}
	want := map[string]string{
		"Spillway-Job-Id":       testID,
		"Spillway-Queue":        "email",
		"Spillway-Key":          "tenant-42",
		"Spillway-Attempt":      "3",
		"Idempotency-Key":       testID,
		"Authorization":         "Bearer abc",
		"Traceparent":           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Tracestate":            "vendor=x",
		"Content-Type":          "application/octet-stream",
		"X-Api-Key":             "",
		"Spillway-Key-Encoding": "",
	}
	for name, v := range want {
		if g := r.header.Get(name); g != v {
			t.Errorf("header %s = %q, want %q", name, g, v)
		}
	}
}

func TestHTTPContentType(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, nil)
	tests := []struct {
		name       string
		configured string
		job        string
		want       string
	}{
		{"default", "", "", "application/octet-stream"},
		{"from the config", "application/json", "", "application/json"},
		{"the job's wins", "application/json", "text/plain", "text/plain"},
	}
	for _, tt := range tests {
		cfg := handler.HTTPConfig{URL: srv.URL}
		if tt.configured != "" {
			cfg.Headers = map[string]string{"Content-Type": tt.configured}
		}
		j := testJob()
		if tt.job != "" {
			j.Header["content-type"] = []string{tt.job}
		}
		if err := mustHTTP(t, cfg, nil)(t.Context(), j); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if g := (<-got).header.Get("Content-Type"); g != tt.want {
			t.Errorf("%s: Content-Type %q, want %q", tt.name, g, tt.want)
		}
	}
}

func TestHTTPKeyThatIsNoHeaderValueIsPercentEncoded(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, nil)
	j := testJob()
	j.Key = "line\nbreak"
	if err := mustHTTP(t, handler.HTTPConfig{URL: srv.URL}, nil)(t.Context(), j); err != nil {
		t.Fatalf("handler: %v", err)
	}
	r := <-got
	if k, enc := r.header.Get("Spillway-Key"), r.header.Get("Spillway-Key-Encoding"); k != "line%0Abreak" || enc != "percent" {
		t.Errorf("Spillway-Key %q with encoding %q, want %q with %q", k, enc, "line%0Abreak", "percent")
	}
}

// outcome is what the worker makes of a handler's error.
type outcome struct {
	ok        bool
	permanent bool
	after     time.Duration
	hasAfter  bool
	pushback  bool // the downstream said it is overloaded (retry.IsPushback)
}

func outcomeOf(err error) outcome {
	if err == nil {
		return outcome{ok: true}
	}
	after, has := retry.RetryAfter(err)
	pushAfter, push := retry.IsPushback(err)
	if push && pushAfter != after {
		return outcome{permanent: true, after: -1} // matches no case: the two delays disagree
	}
	return outcome{permanent: retry.IsPermanent(err), after: after, hasAfter: has, pushback: push}
}

func (o outcome) String() string {
	switch {
	case o.ok:
		return "success"
	case o.permanent:
		return "permanent"
	case o.pushback && o.hasAfter:
		return "pushback, retry after " + o.after.String()
	case o.pushback:
		return "pushback, retry"
	case o.hasAfter:
		return "retry after " + o.after.String()
	}
	return "retry"
}

func TestHTTPStatusMapping(t *testing.T) {
	t.Parallel()
	date := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var (
		success   = outcome{ok: true}
		permanent = outcome{permanent: true}
		plain     = outcome{}
		after     = func(d time.Duration) outcome { return outcome{after: d, hasAfter: true} }
		push      = func(o outcome) outcome { o.pushback = true; return o } // 429 and 503 say the downstream is overloaded
	)
	tests := []struct {
		status     int
		retryAfter string
		date       time.Time // the answer's Date header; zero: the server's own
		want       outcome
	}{
		{status: 200, want: success},
		{status: 201, want: success},
		{status: 202, want: success},
		{status: 204, want: success},
		{status: 299, want: success},
		{status: 400, want: permanent},
		{status: 401, want: permanent},
		{status: 404, want: permanent},
		{status: 409, want: permanent},
		{status: 413, want: permanent},
		{status: 422, want: permanent},
		{status: 429, want: push(plain)},
		{status: 429, retryAfter: "7", want: push(after(7 * time.Second))},
		{status: 429, retryAfter: "0", want: push(after(0))},
		{status: 429, retryAfter: "soon", want: push(plain)},
		{status: 429, retryAfter: "-3", want: push(plain)},
		{status: 429, retryAfter: "99999999999999999999999", want: push(after(handler.MaxRetryAfter))},
		{status: 429, retryAfter: date.Add(90 * time.Second).Format(http.TimeFormat), date: date, want: push(after(90 * time.Second))},
		{status: 503, want: push(plain)},
		{status: 503, retryAfter: "120", want: push(after(2 * time.Minute))},
		{status: 503, retryAfter: date.Add(30 * time.Second).Format(http.TimeFormat), date: date, want: push(after(30 * time.Second))},
		{status: 503, retryAfter: date.Add(-time.Hour).Format(http.TimeFormat), date: date, want: push(after(0))},
		{status: 503, retryAfter: date.Add(48 * time.Hour).Format(http.TimeFormat), date: date, want: push(after(handler.MaxRetryAfter))},
		{status: 500, want: plain},
		{status: 500, retryAfter: "5", want: plain}, // only 429 and 503 are asked to wait
		{status: 502, want: plain},
		{status: 504, want: plain},
		{status: 599, want: plain},
		{status: 302, want: permanent}, // the default client does not turn a POST into a GET
		{status: 301, want: permanent},
		{status: 303, want: permanent},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if v := q.Get("retry_after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		if v := q.Get("date"); v != "" {
			w.Header().Set("Date", v)
		}
		code, err := strconv.Atoi(q.Get("status"))
		if err != nil {
			t.Errorf("server: status %q", q.Get("status"))
		}
		if code/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "because")
	}))
	t.Cleanup(srv.Close)
	for _, tt := range tests {
		u := srv.URL + "/?status=" + strconv.Itoa(tt.status)
		if tt.retryAfter != "" {
			u += "&retry_after=" + url.QueryEscape(tt.retryAfter)
		}
		if !tt.date.IsZero() {
			u += "&date=" + url.QueryEscape(tt.date.Format(http.TimeFormat))
		}
		err := mustHTTP(t, handler.HTTPConfig{URL: u}, nil)(t.Context(), testJob())
		if got := outcomeOf(err); got != tt.want {
			t.Errorf("%d Retry-After %q: %v (%v), want %v", tt.status, tt.retryAfter, got, err, tt.want)
		}
		var se *handler.StatusError
		if err != nil && (!errors.As(err, &se) || se.StatusCode != tt.status) {
			t.Errorf("%d: error %v is not a *StatusError with that status", tt.status, err)
		}
	}
}

func TestHTTPErrorIsOneLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 150) // 300 bytes: cut at 80, on a rune boundary
	tests := []struct {
		body string
		want string
	}{
		{"database is down\nretrying\r\n", ": 500 Internal Server Error: database is down retrying"},
		{"", ": 500 Internal Server Error"},
		{long, ": 500 Internal Server Error: " + strings.Repeat("é", 40) + "…"},
		{"bad\xffbyte", ": 500 Internal Server Error: bad\uFFFDbyte"},
		{"bell\a esc\x1b[31m nul\x00 bidi\u202e.", ": 500 Internal Server Error: bell\uFFFD esc\uFFFD[31m nul\uFFFD bidi\uFFFD."},
	}
	for _, tt := range tests {
		srv, _ := capture(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, tt.body)
		})
		err := mustHTTP(t, handler.HTTPConfig{URL: srv.URL + "/send"}, nil)(t.Context(), testJob())
		if want := "POST " + srv.URL + "/send" + tt.want; err == nil || err.Error() != want {
			t.Errorf("body %q: error\n%v\nwant\n%s", tt.body, err, want)
		}
	}
}

func TestHTTPErrorRedactsThePassword(t *testing.T) {
	t.Parallel()
	srv, _ := capture(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1)
	err := mustHTTP(t, handler.HTTPConfig{URL: u}, nil)(t.Context(), testJob())
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "502 Bad Gateway") {
		t.Errorf("error %v: want a 502 without the password", err)
	}
}

// The body of a failure is drained, so the next job reuses the connection.
func TestHTTPDrainsTheBody(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, strings.Repeat("x", 40<<10))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := mustHTTP(t, handler.HTTPConfig{URL: srv.URL}, srv.Client())
	for range 5 {
		if err := h(t.Context(), testJob()); err == nil {
			t.Fatal("a 500 succeeded")
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 jobs used %d connections, want 1", n)
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, _ := capture(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	h := mustHTTP(t, handler.HTTPConfig{URL: srv.URL, Timeout: 100 * time.Millisecond}, nil)
	began := time.Now()
	err := h(t.Context(), testJob())
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the handler returned after %v, want about 100ms", took)
	}
	if got := outcomeOf(err); got != (outcome{}) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: %v, want a plain retry wrapping context.DeadlineExceeded", err, got)
	}
	if want := "POST " + srv.URL + ": no answer within 100ms"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start with %q", err, want)
	}
}

// The worker's context ending (its grace period ran out) is reported as
// that, not as the downstream timing out.
func TestHTTPWorkerContextEnds(t *testing.T) {
	t.Parallel()
	var once sync.Once
	ctx, cancel := context.WithCancel(t.Context())
	srv, _ := capture(t, func(_ http.ResponseWriter, r *http.Request) {
		once.Do(cancel)
		<-r.Context().Done()
	})
	err := mustHTTP(t, handler.HTTPConfig{URL: srv.URL}, nil)(ctx, testJob())
	if !errors.Is(err, context.Canceled) || retry.IsPermanent(err) {
		t.Errorf("error %v, want a retry wrapping context.Canceled", err)
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	err = mustHTTP(t, handler.HTTPConfig{URL: "http://" + addr + "/send"}, nil)(t.Context(), testJob())
	if got := outcomeOf(err); got != (outcome{}) {
		t.Fatalf("error %v: %v, want a plain retry", err, got)
	}
	if want := "POST http://" + addr + "/send: dial tcp " + addr + ": connect: connection refused"; err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
}

// 307 and 308 repeat the POST with its body; the default client follows them.
func TestHTTPFollowsRedirectsThatKeepThePost(t *testing.T) {
	t.Parallel()
	var final []byte
	mux := http.NewServeMux()
	mux.HandleFunc("POST /old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusPermanentRedirect)
	})
	mux.HandleFunc("POST /new", func(w http.ResponseWriter, r *http.Request) {
		final, _ = io.ReadAll(r.Body)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if err := mustHTTP(t, handler.HTTPConfig{URL: srv.URL + "/old"}, nil)(t.Context(), testJob()); err != nil {
		t.Fatalf("handler: %v", err)
	}
	if string(final) != "hello, downstream" {
		t.Errorf("the redirected POST carried %q", final)
	}
}

func TestHTTPRejectsConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []handler.HTTPConfig{
		{URL: ""},
		{URL: "/send"},
		{URL: "ftp://example.com/send"},
		{URL: "http://"},
		{URL: "http://example.com", Timeout: -time.Second},
		{URL: "http://example.com", Headers: map[string]string{"Spillway-Job-Id": "x"}},
		{URL: "http://example.com", Headers: map[string]string{"idempotency-key": "x"}},
		{URL: "http://example.com", Headers: map[string]string{"Bad Name": "x"}},
		{URL: "http://example.com", Headers: map[string]string{"X-Ok": "bad\nvalue"}},
	} {
		if _, err := handler.HTTP(cfg, nil); !errors.Is(err, handler.ErrInvalidConfig) {
			t.Errorf("HTTP(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// A handler's error becomes a job's last_error, which every submit key can
// read: it names the downstream by scheme, host and path — never the URL's
// user info or query — and quotes only a short, printable excerpt of the
// body, whether the downstream answered, was not there, or redirected to a
// Location that does not parse.
func TestHTTPErrorTellsNoSecret(t *testing.T) {
	t.Parallel()
	secrets := []string{"user", "pass", "SECRET", "TAIL"}
	body := "failed for api_key=sk_live_0123456789 " + strings.Repeat("x", 100) + "\x00\x1b[2J TAIL sk_live_SECRET"
	answered, _ := capture(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	})
	redirected, _ := capture(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "http://user:pass@[::1/%zz?token=SECRET")
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens on its port any more
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://user:pass@", 1) + "/hook?token=SECRET#frag"
	}
	for _, tt := range []struct {
		name, base string
		want       string // in the error
	}{
		{"answered 500", answered.URL, "POST " + answered.URL + "/hook: 500 Internal Server Error: failed for api_key="},
		{"no answer", gone.URL, "POST " + gone.URL + "/hook: "},
		{"bad redirect", redirected.URL, "POST " + redirected.URL + "/hook: "},
	} {
		err := mustHTTP(t, handler.HTTPConfig{URL: withSecrets(tt.base)}, nil)(t.Context(), testJob())
		if err == nil {
			t.Fatalf("%s: no error", tt.name)
		}
		text := err.Error()
		if !strings.HasPrefix(text, tt.want) {
			t.Errorf("%s: error %q, want it to start %q", tt.name, text, tt.want)
		}
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s: error %q tells %q", tt.name, text, s)
			}
		}
		if !utf8.ValidString(text) || strings.ContainsFunc(text, func(r rune) bool { return !unicode.IsPrint(r) }) {
			t.Errorf("%s: error %q has a character that does not print", tt.name, text)
		}
	}
	err := mustHTTP(t, handler.HTTPConfig{URL: withSecrets(answered.URL)}, nil)(t.Context(), testJob())
	se, ok := errors.AsType[*handler.StatusError](err)
	if !ok {
		t.Fatalf("%v is not a *StatusError", err)
	}
	if len(se.Body) > 80+len("…") || !strings.HasSuffix(se.Body, "…") {
		t.Errorf("Body %q: want at most 80 bytes and …", se.Body)
	}
}

// TestHTTPKeepsAConnectionPerSlot: a handler's own client keeps a
// connection for each job it ran at once, so a worker whose slots are all
// busy reuses them rather than dial the downstream for most jobs. Two
// rounds of 32 jobs at once, each held at the downstream until all 32 are
// there, open 32 connections, not 32 and then 30 more.
func TestHTTPKeepsAConnectionPerSlot(t *testing.T) {
	t.Parallel()
	const slots = 32
	var conns atomic.Int32
	var mu sync.Mutex
	arrived, all := 0, make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		arrived++
		if arrived%slots == 0 {
			close(all)
			all = make(chan struct{})
		}
		wait := all
		if arrived%slots == 0 {
			wait = nil
		}
		mu.Unlock()
		if wait != nil {
			select {
			case <-wait:
			case <-time.After(10 * time.Second):
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := mustHTTP(t, handler.HTTPConfig{URL: srv.URL}, nil)
	for round := range 2 {
		var wg sync.WaitGroup
		for range slots {
			wg.Go(func() {
				if err := h(t.Context(), testJob()); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
	}
	if n := conns.Load(); n != slots {
		t.Errorf("2 rounds of %d jobs at once opened %d connections, want %d", slots, n, slots)
	}
}
