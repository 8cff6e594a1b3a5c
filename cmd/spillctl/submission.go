package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/api"
)

// submission is one job to submit.
type submission struct {
	queue          string
	payload        []byte
	headers        headerFlags
	cost           int64
	idempotencyKey string
	apiKey         string
}

// header is an http.Header or a nats.Header.
type header interface {
	Add(k, v string)
	Set(k, v string)
}

// setHeaders adds to h what both doors take from a job besides its payload:
// the --header pairs, Spillway-Cost, Idempotency-Key and Authorization.
func (s *submission) setHeaders(h header) {
	s.headers.each(h.Add)
	if s.cost > 0 {
		h.Set(api.HeaderCost, strconv.FormatInt(s.cost, 10))
	}
	if s.idempotencyKey != "" {
		h.Set(api.HeaderIdempotencyKey, s.idempotencyKey)
	}
	if s.apiKey != "" {
		h.Set("Authorization", "Bearer "+s.apiKey)
	}
}

// jobsPath is the HTTP door's path for submitting to queue q.
func jobsPath(q string) string { return "/v1/queues/" + url.PathEscape(q) + "/jobs" }

// viaHTTP posts the job. A 202 or 429 is a reply; other answers are turned
// into a reply with status "error" when they carry a problem document, and
// into an error otherwise.
func (s *submission) viaHTTP(ctx context.Context, a *admitter) (api.SubmitReply, error) {
	h := http.Header{"Content-Type": {"application/octet-stream"}, "Accept": {"application/json"}}
	s.setHeaders(h)
	ans, err := a.do(ctx, http.MethodPost, jobsPath(s.queue), h, bytes.NewReader(s.payload))
	if err != nil {
		return api.SubmitReply{}, err
	}
	return replyFromHTTP(s.queue, ans, a.base)
}

// replyFromHTTP reads the HTTP door's answer as a SubmitReply, so that
// both doors print alike.
func replyFromHTTP(q string, resp answer, base string) (api.SubmitReply, error) {
	if resp.StatusCode == http.StatusAccepted {
		var rep api.SubmitReply
		if err := json.Unmarshal(resp.Body, &rep); err != nil {
			return api.SubmitReply{}, fmt.Errorf("the admitter at %s accepted the job but its answer is not a submit reply: %w", base, err)
		}
		if rep.ID == "" {
			if loc := resp.Header.Get("Location"); loc != "" {
				rep.ID = loc[strings.LastIndexByte(loc, '/')+1:]
			}
		}
		if rep.Queue == "" {
			rep.Queue = q
		}
		return rep, nil
	}
	p, ok := api.ParseProblem(resp.Header.Get("Content-Type"), resp.Body)
	if resp.StatusCode == http.StatusTooManyRequests {
		rep := api.SubmitReply{Queue: q, Status: api.Rejected, Type: p.Type, Error: p.Detail}
		rep.RetryAfterMS = api.RetryAfter(resp.Header, p, time.Now()).Milliseconds()
		return rep, nil
	}
	if !ok {
		return api.SubmitReply{}, fmt.Errorf("the admitter at %s answered %s (is --server an admitter?)", base, resp.Status)
	}
	msg := p.Title
	if p.Detail != "" {
		msg = p.Detail
	}
	if p.Field != "" {
		msg += " (field " + p.Field + ")"
	}
	if ra := api.RetryAfter(resp.Header, p, time.Now()); ra > 0 && resp.StatusCode == http.StatusServiceUnavailable {
		msg += "; retry after " + fmtDur(ra)
	}
	return api.SubmitReply{Queue: q, Status: api.Failed, Type: p.Type, Error: fmt.Sprintf("%s: %s", resp.Status, msg)}, nil
}

// viaNATS sends the job as a request to spillway.submit.<queue>.
func (s *submission) viaNATS(ctx context.Context, natsURL string) (api.SubmitReply, error) {
	nc, err := connectNATS(natsURL, "spillctl submit")
	if err != nil {
		return api.SubmitReply{}, err
	}
	defer nc.Close()
	m := nats.NewMsg(api.SubmitPrefix + s.queue)
	s.setHeaders(m.Header)
	m.Data = s.payload
	reply, err := nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return api.SubmitReply{}, fmt.Errorf("no admitter answers on %s at %s (is the admitter running and connected to this NATS server?)", m.Subject, natsURL)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return api.SubmitReply{}, fmt.Errorf("no answer on %s within the timeout (raise --timeout; the job may have been taken: resubmit with the same --idempotency-key)", m.Subject)
	case err != nil:
		return api.SubmitReply{}, fmt.Errorf("request on %s: %w", m.Subject, err)
	}
	var rep api.SubmitReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil {
		return api.SubmitReply{}, fmt.Errorf("the reply on %s is not a submit reply: %w", m.Subject, err)
	}
	if st := reply.Header.Get(api.HeaderStatus); rep.Status == "" && st != "" {
		rep.Status = api.Status(st)
	}
	if rep.Queue == "" {
		rep.Queue = s.queue
	}
	return rep, nil
}
