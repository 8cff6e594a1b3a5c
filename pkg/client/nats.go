package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// NewNATS returns a client of the admitter's NATS door over nc: every
// call is a request that one of the admitters answers — submissions on
// spillway.submit.<queue> (spillway.submitbatch.<queue> for a batch),
// Status and Wait on spillway.job.<id>, and Cancel on
// spillway.cancel.<queue>. The calls of the HTTP API alone (Queues,
// Pause, Limits, …) return an error matching errors.ErrUnsupported. The
// client does not close nc.
func NewNATS(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: NewNATS: nil connection", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.httpGiven {
		return nil, fmt.Errorf("%w: WithHTTPClient is for NewHTTP", ErrInvalidOption)
	}
	d := &natsDoor{nc: nc}
	if cfg.apiKey != "" {
		d.auth = "Bearer " + cfg.apiKey
	}
	return &Client{cfg: cfg, t: d}, nil
}

type natsDoor struct {
	nc   *nats.Conn
	auth string // the Authorization header, "" for none
}

// send sends request m with the API key, if the client has one, and
// returns the reply.
func (d *natsDoor) send(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	if d.auth != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header["Authorization"] = []string{d.auth}
	}
	return d.nc.RequestMsgWithContext(ctx, m)
}

func (d *natsDoor) describe() string { return d.nc.ConnectedUrlRedacted() }

func (d *natsDoor) name() string { return "nats" }

// request sends m, decodes the reply's JSON into rep and returns the
// reply; no reply is a *TransportError, one that does not decode an error
// that calls it not a kind reply ("submit", "batch", "cancel").
func (d *natsDoor) request(ctx context.Context, m *nats.Msg, kind string, rep any) (*nats.Msg, error) {
	reply, err := d.send(ctx, m)
	if err != nil {
		return nil, &TransportError{Op: "request " + m.Subject, Err: err}
	}
	if err := json.Unmarshal(reply.Data, rep); err != nil {
		return nil, fmt.Errorf("client: the reply on %s is not a %s reply: %.200q", m.Subject, kind, reply.Data)
	}
	return reply, nil
}

func (d *natsDoor) submit(ctx context.Context, queue string, payload []byte, s *submission) (*Answer, error) {
	m := &nats.Msg{Subject: spillway.SubmitPrefix + queue, Data: payload, Header: make(nats.Header, len(s.headers)+1)}
	for _, kv := range s.headers {
		m.Header[kv[0]] = []string{kv[1]}
	}
	if s.key != "" {
		m.Header[spillway.HeaderIdempotencyKey] = []string{s.key}
	}
	var rep spillway.SubmitReply
	reply, err := d.request(ctx, m, "submit", &rep)
	if err != nil {
		return nil, err
	}
	if rep.Queue == "" {
		rep.Queue = queue
	}
	switch rep.Status {
	case spillway.Admitted, spillway.Queued, spillway.Rejected:
		return answerOf(&rep, s.key, reply.Header.Values(spillway.HeaderShadow)), nil
	}
	return nil, replyError(rep.Queue, rep.ID, rep.Type, rep.Error, "", rep.RetryAfterMS)
}

func (d *natsDoor) submitBatch(ctx context.Context, queue string, body []byte) (*spillway.BatchReply, error) {
	var rep spillway.BatchReply
	if _, err := d.request(ctx, &nats.Msg{Subject: spillway.SubmitBatchPrefix + queue, Data: body}, "batch", &rep); err != nil {
		return nil, err
	}
	if rep.Status == spillway.Failed {
		e := replyError(queue, "", rep.Type, rep.Error, "", 0)
		e.Field = rep.Field
		return nil, e
	}
	return &rep, nil
}

// job asks the admitters for job id's record on spillway.job.<id>: the
// reply is the record, or a problem document (ProblemContentType).
func (d *natsDoor) job(ctx context.Context, id string) (*spillway.Job, error) {
	if id == "" || strings.ContainsAny(id, ".*> \t\r\n") {
		return nil, &ProblemError{Status: http.StatusBadRequest, Type: spillway.ProblemBadRequest, Title: "Bad job id", ID: id,
			Detail: fmt.Sprintf("job id %.64q: not one subject token", id)}
	}
	subject := spillway.JobPrefix + id
	reply, err := d.send(ctx, &nats.Msg{Subject: subject})
	if err != nil {
		return nil, &TransportError{Op: "request " + subject, Err: err}
	}
	if p, ok := spillway.ParseProblem(reply.Header.Get(spillway.HeaderContentType), reply.Data); ok {
		return nil, problemError(spillway.StatusOf(p.Type), p, nil)
	}
	var job spillway.Job
	if err := json.Unmarshal(reply.Data, &job); err != nil || job.ID == "" {
		return nil, fmt.Errorf("client: the reply on %s is not a job's record: %.200q", subject, reply.Data)
	}
	return &job, nil
}

func (d *natsDoor) status(ctx context.Context, id string) (*spillway.Job, error) {
	return d.job(ctx, id)
}

func (d *natsDoor) cancel(ctx context.Context, id string) (*spillway.Job, error) {
	// The cancel subject names the job's queue: its record says which.
	job, err := d.job(ctx, id)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: spillway.CancelPrefix + job.Queue, Header: nats.Header{spillway.HeaderJobID: {id}}}
	var rep spillway.CancelReply
	if _, err := d.request(ctx, m, "cancel", &rep); err != nil {
		return nil, err
	}
	if rep.Status != spillway.Cancelled {
		e := replyError(job.Queue, id, rep.Type, rep.Error, rep.State, 0)
		if e.Type == spillway.ProblemConflict {
			e.Title = "Job not queued"
		}
		return nil, e
	}
	if after, err := d.job(ctx, id); err == nil {
		return after, nil
	}
	job.State = spillway.StateCancelled
	return job, nil
}
