package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// NewHTTP returns a client of the admitter's HTTP door at baseURL, such
// as http://127.0.0.1:8080 (the scheme and host of the admitter's
// http.listen; a path prefix is kept).
func NewHTTP(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: base URL %.200q: want http:// or https:// and a host, such as http://127.0.0.1:8080", ErrInvalidOption, baseURL)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	t := &httpDoor{base: strings.TrimRight(baseURL, "/"), hc: cfg.httpClient}
	if t.hc == nil {
		t.hc = &http.Client{}
	}
	if cfg.apiKey != "" {
		t.auth = "Bearer " + cfg.apiKey
	}
	return &Client{cfg: cfg, t: t}, nil
}

type httpDoor struct {
	base string
	hc   *http.Client
	auth string // the Authorization header, "" for none
}

func (d *httpDoor) describe() string { return d.base }

func (d *httpDoor) name() string { return "http" }

// maxAnswer bounds how much of an answer is read: a batch's reply of a
// thousand jobs is well below it.
const maxAnswer = 8 << 20

// answer is an HTTP answer read in full.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request that accepts JSON and reads its answer.
func (d *httpDoor) do(ctx context.Context, method, path, contentType string, body []byte, s *submission) (answer, error) {
	return d.doAccept(ctx, method, path, acceptJSON, contentType, body, s)
}

// doAccept is do with the Accept header's values.
func (d *httpDoor) doAccept(ctx context.Context, method, path string, accept []string, contentType string, body []byte, s *submission) (answer, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, r)
	if err != nil {
		return answer{}, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	h := req.Header
	h["Accept"] = accept
	if contentType != "" {
		h["Content-Type"] = []string{contentType}
	}
	if d.auth != "" {
		h["Authorization"] = []string{d.auth}
	}
	if s != nil {
		for _, kv := range s.headers {
			h.Set(kv[0], kv[1])
		}
		if s.key != "" {
			h[spillway.HeaderIdempotencyKey] = []string{s.key}
		}
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return answer{}, &TransportError{Op: method + " " + d.base + path, Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return answer{}, &TransportError{Op: "reading the answer to " + method + " " + d.base + path, Err: err}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

var acceptJSON = []string{"application/json"}

// unwrapURLError drops the *url.Error around a transport error: the
// TransportError names the request already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// problem is the error of an answer other than the one expected.
func (d *httpDoor) problem(a answer) *ProblemError {
	p, ok := spillway.ParseProblem(a.header.Get("Content-Type"), a.body)
	if !ok {
		p = spillway.Problem{Title: http.StatusText(a.status), Detail: fmt.Sprintf("the answer of %s is not a problem document (is it an admitter?)", d.base)}
	}
	return problemError(a.status, p, a.header)
}

func jobsPath(queue string) string { return queuePath(queue) + "/jobs" }

func (d *httpDoor) submit(ctx context.Context, queue string, payload []byte, s *submission) (*Answer, error) {
	if payload == nil {
		payload = []byte{}
	}
	a, err := d.do(ctx, http.MethodPost, jobsPath(queue), "application/octet-stream", payload, s)
	if err != nil {
		return nil, err
	}
	shadow := a.header.Values(spillway.HeaderShadow)
	switch a.status {
	case http.StatusAccepted:
		var rep spillway.SubmitReply
		if err := json.Unmarshal(a.body, &rep); err != nil || (rep.Status != spillway.Admitted && rep.Status != spillway.Queued) {
			return nil, fmt.Errorf("client: %s accepted the job, but its answer is not a submit reply: %.200q", d.base, a.body)
		}
		if rep.ID == "" {
			if loc := a.header.Get("Location"); loc != "" {
				rep.ID = loc[strings.LastIndexByte(loc, '/')+1:]
			}
		}
		if rep.Queue == "" {
			rep.Queue = queue
		}
		return answerOf(&rep, s.key, shadow), nil
	case http.StatusTooManyRequests:
		pe := d.problem(a)
		rep := spillway.SubmitReply{Queue: queue, Status: spillway.Rejected, Type: pe.Type, RetryAfterMS: pe.RetryAfter.Milliseconds()}
		ans := answerOf(&rep, s.key, shadow)
		ans.RetryAfter = pe.RetryAfter
		return ans, nil
	}
	return nil, d.problem(a)
}

func (d *httpDoor) submitBatch(ctx context.Context, queue string, body []byte) (*spillway.BatchReply, error) {
	a, err := d.do(ctx, http.MethodPost, jobsPath(queue)+":batch", spillway.BatchJSON, body, nil)
	if err != nil {
		return nil, err
	}
	if a.status != http.StatusOK {
		return nil, d.problem(a)
	}
	var rep spillway.BatchReply
	if err := json.Unmarshal(a.body, &rep); err != nil {
		return nil, fmt.Errorf("client: %s answered a batch with something that is not a batch reply: %w", d.base, err)
	}
	return &rep, nil
}

// record reads one job record from an answer of 200.
func (d *httpDoor) record(a answer) (*spillway.Job, error) {
	if a.status != http.StatusOK {
		return nil, d.problem(a)
	}
	var job spillway.Job
	if err := json.Unmarshal(a.body, &job); err != nil || job.ID == "" {
		return nil, fmt.Errorf("client: %s answered with something that is not a job's status: %.200q", d.base, a.body)
	}
	return &job, nil
}

func jobPath(id string) string { return "/v1/jobs/" + url.PathEscape(id) }

func (d *httpDoor) status(ctx context.Context, id string) (*spillway.Job, error) {
	a, err := d.do(ctx, http.MethodGet, jobPath(id), "", nil, nil)
	if err != nil {
		return nil, err
	}
	return d.record(a)
}

func (d *httpDoor) cancel(ctx context.Context, id string) (*spillway.Job, error) {
	a, err := d.do(ctx, http.MethodDelete, jobPath(id), "", nil, nil)
	if err != nil {
		return nil, err
	}
	return d.record(a)
}
