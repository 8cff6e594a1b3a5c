package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// NewNATS returns a client of the admitter's NATS door over nc:
// submissions are requests to spillway.submit.<queue>, which one of the
// admitters answers; Status and Wait read the job status records in
// JetStream's key-value buckets spillway-jobs-NN, and Cancel sends a request
// to spillway.cancel.<queue>. The client does not close nc.
func NewNATS(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: NewNATS: nil connection", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.apiKeyGiven || cfg.httpGiven || cfg.pollingGiven {
		return nil, fmt.Errorf("%w: WithAPIKey, WithHTTPClient and WithPollInterval are for NewHTTP; a NATS client is authorized by its connection", ErrInvalidOption)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: JetStream: %w", err)
	}
	return &Client{cfg: cfg, t: &natsDoor{nc: nc, js: js, timeout: cfg.timeout}}, nil
}

type natsDoor struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	timeout time.Duration

	mu sync.Mutex
	kv map[string]jetstream.KeyValue // the job status buckets found, by name
}

func (d *natsDoor) describe() string { return d.nc.ConnectedUrlRedacted() }

func (d *natsDoor) name() string { return "nats" }

// request sends m, decodes the reply's JSON into rep and returns the
// reply; no reply is a *TransportError, one that does not decode an error
// that calls it not a kind reply ("submit", "batch", "cancel").
func (d *natsDoor) request(ctx context.Context, m *nats.Msg, kind string, rep any) (*nats.Msg, error) {
	reply, err := d.nc.RequestMsgWithContext(ctx, m)
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

// bucket is the status bucket of job id (the records are spread over
// shards by id); ErrBadRequest for an id that cannot be a job's,
// ErrNotFound when the admitter keeps no job status.
func (d *natsDoor) bucket(ctx context.Context, id string) (jetstream.KeyValue, error) {
	if err := jobstatus.ValidateID(id); err != nil {
		return nil, &ProblemError{Status: http.StatusBadRequest, Type: spillway.ProblemBadRequest, Title: "Bad job id", Detail: err.Error()}
	}
	return d.bucketNamed(ctx, jobstatus.BucketOf(id))
}

// bucketNamed is the status bucket called name.
func (d *natsDoor) bucketNamed(ctx context.Context, name string) (jetstream.KeyValue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if kv, ok := d.kv[name]; ok {
		return kv, nil
	}
	kv, err := d.js.KeyValue(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, &ProblemError{Status: http.StatusNotFound, Type: spillway.ProblemNotFound, Title: "Job status is not kept",
			Detail: "no bucket " + name + " on this NATS server: the admitter keeps no job status"}
	case err != nil:
		return nil, &TransportError{Op: "the job status bucket " + name, Err: err}
	}
	if d.kv == nil {
		d.kv = make(map[string]jetstream.KeyValue)
	}
	d.kv[name] = kv
	return kv, nil
}

func notFound(id string) *ProblemError {
	return &ProblemError{Status: http.StatusNotFound, Type: spillway.ProblemNotFound, Title: "Unknown job", ID: id,
		Detail: "no status for this job id (unknown, or older than status.ttl)"}
}

// decode reads a record's value.
func decode(id string, value []byte) (*Job, error) {
	var rec jobstatus.Record
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("client: job %s: its status record does not decode: %w", id, err)
	}
	return jobOf(&rec), nil
}

func (d *natsDoor) status(ctx context.Context, id string) (*Job, error) {
	kv, err := d.bucket(ctx, id)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return d.first(ctx, id)
	case err != nil:
		return nil, &TransportError{Op: "reading job " + id, Err: err}
	}
	return decode(id, e.Value())
}

// first is job id's first record from its batch's group record, for a
// job that has no record of its own: a batch's job that no worker has
// started yet (jobstatus.GetFirst).
func (d *natsDoor) first(ctx context.Context, id string) (*Job, error) {
	kv, err := d.bucketNamed(ctx, jobstatus.GroupBucketOf(id))
	if err != nil {
		return nil, err
	}
	rec, err := jobstatus.GetFirst(ctx, kv, id)
	switch {
	case errors.Is(err, jobstatus.ErrNotFound):
		return nil, notFound(id)
	case err != nil:
		return nil, &TransportError{Op: "reading job " + id, Err: err}
	}
	return jobOf(&rec), nil
}

func (d *natsDoor) cancel(ctx context.Context, id string) (*Job, error) {
	// The cancel subject names the job's queue: its record says which.
	job, err := d.status(ctx, id)
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
	if after, err := d.status(ctx, id); err == nil {
		return after, nil
	}
	job.State = StateCancelled
	return job, nil
}

// wait watches the job's record until it is final.
func (d *natsDoor) wait(ctx context.Context, id string) (*Job, error) {
	kv, err := d.bucket(ctx, id)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, id)
	if err != nil {
		return nil, &TransportError{Op: "watching job " + id, Err: err}
	}
	defer func() { _ = w.Stop() }()
	var grace <-chan time.Time
	seen := false
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-grace:
			// The admitter stores a batch's group record asynchronously,
			// usually just after its answer: it may have come since the
			// watch began.
			if _, err := d.first(ctx, id); err != nil {
				return nil, err // not found, or a read that failed
			}
			seen, grace = true, nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil, &TransportError{Op: "watching job " + id, Err: errors.New("the watch ended")}
			}
			if e == nil { // the end of the record as it was when the watch began
				if !seen {
					// No record of its own: a batch's job not yet
					// started has its first record in its group's.
					// A group record is never final; an error reading it
					// is waited out as a missing record is.
					if _, err := d.first(ctx, id); err == nil {
						seen = true
					} else {
						grace = time.After(notFoundGrace)
					}
				}
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			seen, grace = true, nil
			job, err := decode(id, e.Value())
			if err != nil {
				return nil, err
			}
			if job.State.Final() {
				return job, nil
			}
		}
	}
}
