package door

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Batches (docs/design.md#batches): POST /v1/queues/{queue}/jobs:batch and
// requests to spillway.submitbatch.<queue> carry up to admit.MaxBatch jobs
// as a JSON array or NDJSON of spillway.BatchJob, and are answered with one
// spillway.BatchResult per job, in order (spillway.BatchReply): the spillway.SubmitReply
// a single submission would get, with its Spillway-Shadow values.

// batchBodyFactor bounds a batch's body: this many times
// http.max_body_bytes, which bounds each job's payload.
const batchBodyFactor = 16

// batchError is a batch that cannot be read: its problem type and the
// field at fault (jobs[i].field, or the body).
type batchError struct {
	typ, field, detail string
}

func (e *batchError) Error() string { return e.detail }

// readBatch reads a batch body: a JSON array of jobs, or NDJSON (one job
// per line) when ndjson is set. Each job's payload may hold at most
// maxPayload bytes. The jobs' headers are read as single submissions' are
// (requestOf): a job whose headers are wrong is that job's error, not the
// batch's. natsDoor says which door, for requestOf.
func readBatch(body []byte, ndjson bool, queue string, maxPayload int64, natsDoor bool) ([]*admit.Request, []*admit.Error, error) {
	jobs, ok := scanBatch(body, ndjson, maxPayload)
	if !ok {
		var err error
		if jobs, err = decodeBatch(body, ndjson, maxPayload); err != nil {
			return nil, nil, err
		}
	}
	reqs := make([]*admit.Request, len(jobs))
	bad := make([]*admit.Error, len(jobs))
	for i, j := range jobs {
		req, e := requestOf(queue, j.payload, headerLookup(j.headers), natsDoor)
		if req == nil {
			req = &admit.Request{Queue: queue}
		}
		reqs[i], bad[i] = req, e
	}
	return reqs, bad, nil
}

// batchItem is one job of a batch as read from the body: its headers and
// its payload (text or decoded base64).
type batchItem struct {
	headers map[string]string
	payload []byte
}

// decodeBatch reads a batch body with encoding/json, whose errors name
// the job and the field at fault: for every body scanBatch does not read.
func decodeBatch(body []byte, ndjson bool, maxPayload int64) ([]batchItem, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if !ndjson {
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('[') {
			return nil, &batchError{spillway.ProblemBadRequest, "body", "the body is not a JSON array of jobs (send NDJSON as " + spillway.BatchNDJSON + ")"}
		}
	}
	var jobs []batchItem
	for i := 0; ; i++ {
		if !ndjson && !dec.More() {
			if _, err := dec.Token(); err != nil {
				return nil, &batchError{spillway.ProblemBadRequest, "body", "the JSON array of jobs does not end: " + err.Error()}
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return nil, &batchError{spillway.ProblemBadRequest, "body", "more after the JSON array of jobs"}
			}
			break
		}
		var j spillway.BatchJob
		err := dec.Decode(&j)
		if ndjson && errors.Is(err, io.EOF) {
			break
		}
		field := fmt.Sprintf("jobs[%d]", i)
		if err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				field += "." + te.Field
			} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				field += "." + strings.Trim(f, `"`)
			}
			return nil, &batchError{spillway.ProblemBadRequest, field,
				fmt.Sprintf("job %d: %v; want {\"headers\": {NAME: VALUE, …}, \"payload\": TEXT} or \"payload_base64\"", i, err)}
		}
		if i >= admit.MaxBatch {
			return nil, &batchError{spillway.ProblemTooLarge, "body", fmt.Sprintf("more than %d jobs in one batch", admit.MaxBatch)}
		}
		var payload []byte
		switch {
		case j.Payload != nil && j.PayloadBase64 != nil:
			return nil, &batchError{spillway.ProblemBadRequest, field + ".payload_base64",
				fmt.Sprintf("job %d has both payload and payload_base64: send one", i)}
		case j.Payload != nil:
			payload = []byte(*j.Payload)
		case j.PayloadBase64 != nil:
			if payload, err = base64.StdEncoding.DecodeString(*j.PayloadBase64); err != nil {
				return nil, &batchError{spillway.ProblemBadRequest, field + ".payload_base64",
					fmt.Sprintf("job %d: payload_base64 is not standard base64: %v", i, err)}
			}
		}
		if int64(len(payload)) > maxPayload {
			f := field + ".payload"
			if j.PayloadBase64 != nil {
				f += "_base64"
			}
			return nil, &batchError{spillway.ProblemTooLarge, f,
				fmt.Sprintf("job %d: a payload of %d bytes is larger than http.max_body_bytes (%d bytes)", i, len(payload), maxPayload)}
		}
		if _, ok := j.Headers[""]; ok {
			return nil, &batchError{spillway.ProblemBadRequest, field + ".headers", fmt.Sprintf("job %d: a header with an empty name", i)}
		}
		jobs = append(jobs, batchItem{j.Headers, payload})
	}
	if len(jobs) == 0 {
		return nil, &batchError{spillway.ProblemBadRequest, "body", fmt.Sprintf("a batch of no jobs: send 1 to %d", admit.MaxBatch)}
	}
	return jobs, nil
}

// submit hands the jobs whose headers could be read to the admitter and
// returns one reply per job, in order; bad[i] is job i's header error.
func (a *batchRun) submit(ctx context.Context, reqs []*admit.Request, bad []*admit.Error) (spillway.BatchReply, error) {
	rep := spillway.BatchReply{Queue: a.queue, Results: make([]spillway.BatchResult, len(reqs))}
	var good []*admit.Request
	var at []int
	for i, r := range reqs {
		if bad[i] != nil {
			rep.Results[i].SubmitReply = errorReply(a.queue, bad[i])
			continue
		}
		good = append(good, r)
		at = append(at, i)
	}
	results, err := a.admitter.SubmitBatch(ctx, a.queue, good)
	if err != nil {
		return spillway.BatchReply{}, err
	}
	failed, first := 0, error(nil)
	for k, res := range results {
		if res.Err != nil {
			e := errorReply(a.queue, res.Err)
			rep.Results[at[k]].SubmitReply = e
			if e.Type == spillway.ProblemUnavailable || e.Type == spillway.ProblemInternal {
				failed++
				first = cmp.Or(first, res.Err)
			}
			continue
		}
		rep.Results[at[k]] = spillway.BatchResult{SubmitReply: res.Answer.Reply, Shadow: res.Answer.ShadowHeader()}
	}
	if failed > 0 {
		a.logger.Warn("door: batch submissions failed", "queue", a.queue, "failed", failed, "jobs", len(reqs), "first_err", first)
	}
	return rep, nil
}

// batchRun is one batch's door-side context.
type batchRun struct {
	admitter *admit.Admitter
	queue    string
	logger   *slog.Logger
}

// errorReply is a job's reply for an error, as the NATS door answers one.
func errorReply(queue string, err error) spillway.SubmitReply {
	rep := spillway.SubmitReply{Queue: queue, Status: spillway.Failed, Type: spillway.ProblemInternal, Error: err.Error()}
	var e *admit.Error
	if errors.As(err, &e) {
		rep.Type, rep.Error, rep.RetryAfterMS = e.Type, e.Detail, retryMS(e.RetryAfter)
	}
	return rep
}

func (h *httpDoor) submitBatch(w http.ResponseWriter, r *http.Request) {
	cfg, name, who, ok := h.submission(w, r)
	if !ok {
		return
	}
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (ct != spillway.BatchJSON && ct != spillway.BatchNDJSON) {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: "Content-Type",
			Detail: fmt.Sprintf("Content-Type %.80q: want %s (a JSON array of jobs) or %s (one job per line)", r.Header.Get("Content-Type"), spillway.BatchJSON, spillway.BatchNDJSON)})
		return
	}
	body, release, ok := h.readSubmission(w, r, batchBodyFactor*cfg.HTTP.MaxBodyBytes, batchTooLarge)
	if !ok {
		return
	}
	defer release()
	reqs, bad, err := readBatch(body, ct == spillway.BatchNDJSON, name, cfg.HTTP.MaxBodyBytes, false)
	if err != nil {
		var be *batchError
		errors.As(err, &be)
		problem(w, r, statusOf(be.typ), spillway.Problem{Type: be.typ, Title: titleOf(be.typ), Field: be.field, Detail: be.detail, Queue: name})
		return
	}
	peer := clientIP(r, cfg.HTTP.TrustedProxies)
	for _, q := range reqs {
		q.Peer, q.Caller = peer, who.id
	}
	rep, err := (&batchRun{admitter: h.o.Admitter, queue: name, logger: h.o.Logger}).submit(r.Context(), reqs, bad)
	if err != nil {
		h.submitError(w, r, name, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", rep)
}

func batchTooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	problem(w, r, http.StatusRequestEntityTooLarge, spillway.Problem{Type: spillway.ProblemTooLarge, Title: "Payload too large", Field: "body",
		Detail: fmt.Sprintf("the batch is larger than %d × http.max_body_bytes (%d bytes)", batchBodyFactor, limit)})
}

// startBatch subscribes to spillway.submitbatch.* in the admitters' queue
// group, as Start does for single submissions.
func (d *NATSDoor) startBatch() error {
	sub, err := d.subscribe(spillway.SubmitBatchPrefix, d.answerBatch, 1<<16)
	if err != nil {
		return err
	}
	d.batchSub = sub
	return nil
}

func (d *NATSDoor) answerBatch(m *nats.Msg) {
	if !d.Access.answers(m) {
		return
	}
	name := strings.TrimPrefix(m.Subject, spillway.SubmitBatchPrefix)
	fail := func(typ, field, detail string) {
		d.replyBatch(m, spillway.BatchReply{Queue: name, Status: spillway.Failed, Type: typ, Field: field, Error: detail})
	}
	who, ok := d.Access.caller(m)
	if !ok {
		fail(spillway.ProblemUnauthorized, "", unauthorizedDetail)
		return
	}
	cfg := d.admitter.Config()
	if cfg.Queue(name) == nil {
		fail(spillway.ProblemNotFound, "", fmt.Sprintf("no queue %.80q", name))
		return
	}
	// NDJSON unless the body is a JSON array.
	ndjson := !bytes.HasPrefix(bytes.TrimLeft(m.Data, " \t\r\n"), []byte("["))
	reqs, bad, err := readBatch(m.Data, ndjson, name, cfg.HTTP.MaxBodyBytes, true)
	if err != nil {
		var be *batchError
		errors.As(err, &be)
		fail(be.typ, be.field, be.detail)
		return
	}
	for _, q := range reqs {
		q.Caller = who.id
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	rep, err := (&batchRun{admitter: d.admitter, queue: name, logger: d.logger}).submit(ctx, reqs, bad)
	if err != nil {
		e := errorReply(name, err)
		fail(e.Type, "", e.Error)
		return
	}
	d.replyBatch(m, rep)
}

func (d *NATSDoor) replyBatch(m *nats.Msg, rep spillway.BatchReply) {
	replyJSON(d.nc, d.logger, m, rep, rep.Status, nil, "queue", rep.Queue, "jobs", len(rep.Results))
}

// headerLookup looks a job's header up by name, in any case: the name as
// spelt first, then any spelling.
func headerLookup(h map[string]string) func(string) string {
	return func(name string) string {
		if v, ok := h[name]; ok {
			return v
		}
		for k, v := range h {
			if strings.EqualFold(k, name) {
				return v
			}
		}
		return ""
	}
}
