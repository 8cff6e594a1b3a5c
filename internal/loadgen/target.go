package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/api"
)

// maxReply bounds how much of an answer is read.
const maxReply = 64 << 10

// HTTPTarget submits jobs to an admitter's HTTP front door (docs/design.md#doors):
// POST URL with the payload, Header, and the request's key in KeyHeader.
type HTTPTarget struct {
	// Client sends the requests (default http.DefaultClient, which has no
	// timeout: set one).
	Client *http.Client
	// URL is the submit URL, such as
	// http://127.0.0.1:8080/v1/queues/demo/jobs.
	URL string
	// Header is sent with every job: Authorization, Spillway-Cost, ...
	Header http.Header
	// KeyHeader carries Request.Key (nothing is sent for an empty key).
	KeyHeader string
	// Payload is every job's body.
	Payload []byte
}

// Submit posts one job and classifies the answer (ClassifyHTTP).
func (t *HTTPTarget) Submit(ctx context.Context, r Request) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(t.Payload))
	if err != nil {
		return Outcome{Failed, "bad request"}
	}
	for k, vs := range t.Header {
		req.Header[k] = vs
	}
	if r.Key != "" && t.KeyHeader != "" {
		req.Header.Set(t.KeyHeader, r.Key)
	}
	client := t.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Outcome{Failed, transportReason(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return Outcome{Failed, transportReason(err)}
	}
	_, _ = io.Copy(io.Discard, resp.Body) // so the connection is reused
	return ClassifyHTTP(resp.StatusCode, resp.Header.Get("Content-Type"), body)
}

// ClassifyHTTP turns an answer of the HTTP front door into an Outcome:
// 202 with an api.SubmitReply is admitted or queued; 429 is rejected, the
// reason the problem type's last segment ("queue-full"); anything else is
// an error such as "http 503 unavailable".
func ClassifyHTTP(status int, contentType string, body []byte) Outcome {
	switch status {
	case http.StatusAccepted:
		var rep api.SubmitReply
		if err := json.Unmarshal(body, &rep); err == nil {
			if o, ok := accepted(rep.Status); ok {
				return o
			}
		}
		return Outcome{Failed, "bad reply"}
	case http.StatusTooManyRequests:
		return Outcome{Rejected, problemReason(contentType, body, "429")}
	}
	reason := "http " + strconv.Itoa(status)
	if p := problemReason(contentType, body, ""); p != "" {
		reason += " " + p
	}
	return Outcome{Failed, reason}
}

// problemReason is the last segment of a problem document's type, or def.
func problemReason(contentType string, body []byte, def string) string {
	if p, ok := api.ParseProblem(contentType, body); ok && p.Type != "" {
		return api.ProblemReason(p.Type)
	}
	return def
}

// transportReason names a failed exchange in a word or two.
func transportReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset"
	}
	return "transport"
}

// NATSTarget submits jobs to an admitter's NATS front door (docs/design.md#doors): a
// request to Subject with the payload, Header, and the request's key in
// KeyHeader.
type NATSTarget struct {
	Conn *nats.Conn
	// Subject is api.SubmitPrefix + the queue name.
	Subject string
	// Header is sent with every job (Spillway-Cost, ...).
	Header nats.Header
	// KeyHeader carries Request.Key (nothing is sent for an empty key).
	KeyHeader string
	Payload   []byte
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
}

// Submit sends one job and classifies the reply (ClassifyNATS).
func (t *NATSTarget) Submit(ctx context.Context, r Request) Outcome {
	m := nats.NewMsg(t.Subject)
	for k, vs := range t.Header {
		m.Header[k] = vs
	}
	if r.Key != "" && t.KeyHeader != "" {
		m.Header.Set(t.KeyHeader, r.Key)
	}
	m.Data = t.Payload
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := t.Conn.RequestMsgWithContext(ctx, m)
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return Outcome{Failed, "no responders"}
		case errors.Is(err, nats.ErrTimeout):
			return Outcome{Failed, "timeout"}
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
			return Outcome{Failed, "connection closed"}
		}
		return Outcome{Failed, transportReason(err)}
	}
	return ClassifyNATS(reply.Header, reply.Data)
}

// ClassifyNATS turns a reply of the NATS front door into an Outcome: the
// Spillway-Status header if it says admitted or queued, else the
// api.SubmitReply in the body; a rejection's or error's reason is the
// reply's problem type, shortened ("queue-full").
func ClassifyNATS(h nats.Header, data []byte) Outcome {
	if o, ok := accepted(api.Status(h.Get(api.HeaderStatus))); ok {
		return o
	}
	var rep api.SubmitReply
	if err := json.Unmarshal(data, &rep); err != nil {
		return Outcome{Failed, "bad reply"}
	}
	if o, ok := accepted(rep.Status); ok {
		return o
	}
	switch rep.Status {
	case api.Rejected:
		if rep.Type == "" {
			return Outcome{Rejected, "rejected"}
		}
		return Outcome{Rejected, api.ProblemReason(rep.Type)}
	case api.Failed:
		if rep.Type == "" {
			return Outcome{Failed, "error"}
		}
		return Outcome{Failed, api.ProblemReason(rep.Type)}
	}
	return Outcome{Failed, "bad reply"}
}

// accepted is the Outcome of an admitted or queued answer; ok is false for
// any other status.
func accepted(s api.Status) (o Outcome, ok bool) {
	switch s {
	case api.Admitted:
		return Outcome{Verdict: Admitted}, true
	case api.Queued:
		return Outcome{Verdict: Queued}, true
	}
	return Outcome{}, false
}
