package loadgen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/api"
)

// Batch builds the bodies of batch submissions (docs/design.md#batches):
// Size jobs each, the same payload and headers, the client keys taken in
// turn from Keys (job i of request Seq gets Keys[(Seq·Size+i) mod len]) in
// KeyHeader. A run's Counts then count jobs, and its latencies are those
// of whole batches.
type Batch struct {
	Size      int
	Keys      []string
	KeyHeader string
	// Header is every job's headers (Spillway-Cost, ...).
	Header  map[string]string
	Payload []byte

	bodies sync.Map // first key's index → []byte
}

// body is request r's batch, built once per first key.
func (b *Batch) body(r Request) []byte {
	off := 0
	if n := len(b.Keys); n > 0 {
		off = int((r.Seq * int64(b.Size)) % int64(n))
	}
	if v, ok := b.bodies.Load(off); ok {
		return v.([]byte)
	}
	payload := base64.StdEncoding.EncodeToString(b.Payload)
	jobs := make([]api.BatchJob, b.Size)
	for i := range jobs {
		h := make(map[string]string, len(b.Header)+1)
		for k, v := range b.Header {
			h[k] = v
		}
		if n := len(b.Keys); n > 0 && b.KeyHeader != "" {
			h[b.KeyHeader] = b.Keys[(off+i)%n]
		}
		jobs[i] = api.BatchJob{Headers: h, PayloadBase64: &payload}
	}
	body, _ := json.Marshal(jobs)
	b.bodies.Store(off, body)
	return body
}

// outcome classifies a batch's reply, job by job; a batch answered
// without results fails each of its jobs with failed's reason.
func (b *Batch) outcome(rep api.BatchReply, failed Outcome) []Outcome {
	if len(rep.Results) != b.Size {
		if failed.Reason == "" {
			failed = Outcome{Verdict: Failed, Reason: "bad reply"}
		}
		return b.all(failed)
	}
	jobs := make([]Outcome, len(rep.Results))
	for i, r := range rep.Results {
		jobs[i] = classifyReply(r.SubmitReply)
	}
	return jobs
}

// all is failed for every job of a batch.
func (b *Batch) all(failed Outcome) []Outcome {
	jobs := make([]Outcome, b.Size)
	for i := range jobs {
		jobs[i] = failed
	}
	return jobs
}

// JobsTarget is a Target whose every submission carries several jobs (a
// batch). The runner calls SubmitJobs instead of Submit and counts each
// job's Outcome; nil means the context ended (not counted).
type JobsTarget interface {
	Target
	SubmitJobs(ctx context.Context, r Request) []Outcome
}

// first is Submit's answer for a target of batches: the first job's.
func first(jobs []Outcome) Outcome {
	if len(jobs) == 0 {
		return Outcome{Verdict: Failed, Reason: "canceled"}
	}
	return jobs[0]
}

// classifyReply is the Outcome of one SubmitReply.
func classifyReply(rep api.SubmitReply) Outcome {
	if o, ok := accepted(rep.Status); ok {
		return o
	}
	reason := "error"
	if rep.Type != "" {
		reason = api.ProblemReason(rep.Type)
	}
	switch rep.Status {
	case api.Rejected:
		if rep.Type == "" {
			reason = "rejected"
		}
		return Outcome{Verdict: Rejected, Reason: reason}
	case api.Failed:
		return Outcome{Verdict: Failed, Reason: reason}
	}
	return Outcome{Verdict: Failed, Reason: "bad reply"}
}

// HTTPBatchTarget posts batches to POST /v1/queues/{queue}/jobs:batch.
type HTTPBatchTarget struct {
	Client *http.Client
	// URL is the batch URL, such as
	// http://127.0.0.1:8080/v1/queues/demo/jobs:batch.
	URL string
	// Header is sent with every request (Authorization); the jobs'
	// headers are the Batch's.
	Header http.Header
	Batch  *Batch
}

// Submit posts one batch and classifies its first job (SubmitJobs has them
// all).
func (t *HTTPBatchTarget) Submit(ctx context.Context, r Request) Outcome {
	return first(t.SubmitJobs(ctx, r))
}

// SubmitJobs posts one batch and classifies its jobs.
func (t *HTTPBatchTarget) SubmitJobs(ctx context.Context, r Request) []Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(t.Batch.body(r)))
	if err != nil {
		return t.Batch.all(Outcome{Verdict: Failed, Reason: "bad request"})
	}
	for k, vs := range t.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", api.BatchJSON)
	client := t.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return t.Batch.all(Outcome{Verdict: Failed, Reason: transportReason(err)})
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64*maxReply))
	if err != nil {
		return t.Batch.all(Outcome{Verdict: Failed, Reason: transportReason(err)})
	}
	if resp.StatusCode != http.StatusOK {
		return t.Batch.all(ClassifyHTTP(resp.StatusCode, resp.Header.Get("Content-Type"), body))
	}
	var rep api.BatchReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return t.Batch.all(Outcome{Verdict: Failed, Reason: "bad reply"})
	}
	return t.Batch.outcome(rep, Outcome{})
}

// NATSBatchTarget sends batches as requests to spillway.submitbatch.<queue>.
type NATSBatchTarget struct {
	Conn *nats.Conn
	// Subject is api.SubmitBatchPrefix + the queue name.
	Subject string
	Batch   *Batch
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
}

// Submit sends one batch and classifies its first job (SubmitJobs has them
// all).
func (t *NATSBatchTarget) Submit(ctx context.Context, r Request) Outcome {
	return first(t.SubmitJobs(ctx, r))
}

// SubmitJobs sends one batch and classifies its jobs.
func (t *NATSBatchTarget) SubmitJobs(ctx context.Context, r Request) []Outcome {
	parent := ctx
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := t.Conn.RequestWithContext(ctx, t.Subject, t.Batch.body(r))
	if err != nil {
		if parent.Err() != nil {
			return nil
		}
		reason := transportReason(err)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			reason = "no responders"
		case errors.Is(err, nats.ErrTimeout):
			reason = "timeout"
		}
		return t.Batch.all(Outcome{Verdict: Failed, Reason: reason})
	}
	var rep api.BatchReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil {
		return t.Batch.all(Outcome{Verdict: Failed, Reason: "bad reply"})
	}
	failed := Outcome{}
	if rep.Status == api.Failed {
		failed = Outcome{Verdict: Failed, Reason: api.ProblemReason(rep.Type)}
	}
	return t.Batch.outcome(rep, failed)
}
