package handler

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

// StatusError is an HTTP handler's failure when the downstream answered:
// the status and an excerpt of the body. Its Error is one line:
//
//	POST http://127.0.0.1:9000/send: 500 Internal Server Error: database is down
//
// It becomes a job's last_error, which any submit key may read: URL has no
// user info or query, and Body is a short excerpt that cannot carry much of
// whatever the downstream echoed.
type StatusError struct {
	Method     string
	URL        string // scheme://host/path: no user info, query or fragment
	StatusCode int
	Status     string // "500 Internal Server Error", cleaned as Body is
	// Body is the body's start on one line: at most 80 bytes of printable
	// UTF-8 (anything else is U+FFFD), "…" when cut.
	Body string
}

func (e *StatusError) Error() string {
	s := e.Method + " " + e.URL + ": " + e.Status
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// HTTP returns a handler that POSTs each job to cfg.URL (package doc:
// headers, status mapping, errors). Each request has cfg.Timeout (default
// DefaultTimeout) to answer, headers and body included.
//
// client sends the requests; nil means one on a transport of its own (a
// clone of http.DefaultTransport, so that nothing else closing the default
// transport's idle connections breaks a request of this handler's) that
// follows 307 and 308 redirects (which repeat the POST with its body) but
// not 301, 302 and 303, which Go would follow with a GET that drops the
// payload — their answer is a permanent failure instead. A client of the
// caller's keeps its own redirect policy.
//
// The handler is safe for concurrent use.
func HTTP(cfg HTTPConfig, client *http.Client) (worker.Handler, error) {
	if err := (Config{HTTP: &cfg}).Validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.URL)
	timeout := cmp.Or(cfg.Timeout, DefaultTimeout)
	static := http.Header{}
	for name, v := range cfg.Headers {
		static.Set(name, v)
	}
	if client == nil {
		client = NewHTTPClient()
	}
	h := &httpHandler{url: u.String(), shown: shownURL(u), timeout: timeout, header: static, client: client}
	return h.handle, nil
}

type httpHandler struct {
	url     string
	shown   string // url for errors and logs: shownURL
	timeout time.Duration
	header  http.Header
	client  *http.Client
}

func (h *httpHandler) handle(ctx context.Context, j *queue.Job) error {
	rctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, h.url, bytes.NewReader(j.Payload))
	if err != nil {
		return fmt.Errorf("POST %s: %w", h.shown, scrub(err))
	}
	req.Header = h.header.Clone()
	jobHeaders(j, req.Header.Set)
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return h.failed(ctx, err)
	}
	defer func() {
		// Read what is left, up to maxDrain, so that the connection can
		// carry the next request.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		_ = resp.Body.Close()
	}()
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		costActual(j, resp.Header.Get(spillway.HeaderCostActual))
		return nil
	}
	se := &StatusError{Method: http.MethodPost, URL: h.shown, StatusCode: code, Status: excerpt(resp.Status, excerptLen), Body: bodyExcerpt(resp.Body)}
	if se.Status == "" {
		se.Status = strconv.Itoa(code) + " " + http.StatusText(code)
	}
	switch {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		// The downstream is overloaded: the queue's leak pauses
		// (docs/design.md#pushback) and the job waits its Retry-After.
		var err error = se
		d, ok := parseRetryAfter(resp.Header.Get(spillway.HeaderRetryAfter), resp.Header.Get("Date"), time.Now())
		if ok {
			err = retry.After(se, d)
		}
		return retry.Pushback(err, d)
	case code >= 300 && code <= 499:
		return retry.Permanent(se)
	default: // 5xx, and codes outside the classes
		return se
	}
}

// failed is the error for a request that got no answer. The worker's own
// context ending is reported as that, not as the downstream's timeout.
func (h *httpHandler) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("POST %s: %w", h.shown, context.Cause(ctx))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("POST %s: no answer within %v: %w", h.shown, h.timeout, context.DeadlineExceeded)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the method and the whole URL
	}
	return fmt.Errorf("POST %s: %w", h.shown, scrub(err))
}

// NewHTTPClient is the client an http handler uses unless given one: it
// follows only the redirects that keep the POST (keepPost), and it keeps
// an idle connection for every request it made at once, so a worker whose
// handler slots are all busy reuses its connections to the downstream
// rather than dial one for most jobs (Go's default transport keeps two
// a host). Idle connections close after the default transport's 90 s.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no bound across hosts: a host's own bounds it
	t.MaxIdleConnsPerHost = maxIdlePerHost
	return &http.Client{Transport: t, CheckRedirect: keepPost}
}

// maxIdlePerHost bounds the idle connections NewHTTPClient's transport
// keeps to one downstream: more than any worker's handler slots run at
// once; what is kept is never more than ran at once.
const maxIdlePerHost = 4096

// keepPost stops at a redirect that would turn the POST into a GET.
func keepPost(req *http.Request, via []*http.Request) error {
	if req.Method != http.MethodPost {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// bodyExcerpt reads the start of a failure's body as its excerpt.
func bodyExcerpt(body io.Reader) string {
	buf := make([]byte, excerptRead)
	n, _ := io.ReadFull(body, buf) // a short or failed read leaves what it got
	return excerpt(string(buf[:n]), excerptLen)
}
