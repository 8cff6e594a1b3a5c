package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The commands that submit, read and cancel jobs do it with pkg/client,
// the producers' own client; this file turns its answers and errors into
// what spillctl prints.

// natsClient connects to natsURL and returns a client of the NATS door
// over the connection, which close closes.
func natsClient(natsURL, name string, getenv func(string) string, opts ...client.Option) (c *client.Client, closeConn func(), err error) {
	nc, err := connectNATS(natsURL, name, getenv)
	if err != nil {
		return nil, nil, err
	}
	if c, err = client.NewNATS(nc, opts...); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc.Close, nil
}

// keyOption is the client option that sends key (none when empty): the
// NATS door takes the HTTP door's API keys.
func keyOption(key string) []client.Option {
	if key == "" {
		return nil
	}
	return []client.Option{client.WithAPIKey(key)}
}

// submitOptions are the options of --header pairs and --cost.
func submitOptions(headers headerFlags, cost int64) []client.SubmitOption {
	var opts []client.SubmitOption
	headers.each(func(k, v string) { opts = append(opts, client.WithHeader(k, v)) })
	if cost > 0 {
		opts = append(opts, client.WithCost(cost))
	}
	return opts
}

// replyOf is a submission's outcome as the doors' reply (what --json
// prints): the answer, or an answer's error as a reply with status
// "error". An error with no answer behind it is returned, explained for
// the door: where is the admitter missing.
func replyOf(q string, ans *client.Answer, err error, via, where string) (spillway.SubmitReply, error) {
	if ans != nil {
		rep := spillway.SubmitReply{ID: ans.ID, Queue: ans.Queue, Status: ans.Verdict, Position: ans.Position,
			Duplicate: ans.Duplicate, Type: ans.Problem, RetryAfterMS: ans.RetryAfter.Milliseconds()}
		if !ans.NotBefore.IsZero() {
			rep.NotBefore = &ans.NotBefore
		}
		if !ans.EstimatedStart.IsZero() {
			rep.EstimatedStart = &ans.EstimatedStart
		}
		return rep, nil
	}
	var pe *client.ProblemError
	if errors.As(err, &pe) {
		msg := pe.Detail
		if msg == "" {
			msg = pe.Title
		}
		if pe.Field != "" {
			msg += " (field " + pe.Field + ")"
		}
		if via == "http" {
			if pe.RetryAfter > 0 && pe.Status == http.StatusServiceUnavailable {
				msg += "; retry after " + fmtDur(pe.RetryAfter)
			}
			msg = fmt.Sprintf("%d %s: %s", pe.Status, http.StatusText(pe.Status), msg)
		}
		return spillway.SubmitReply{Queue: q, Status: spillway.Failed, Type: pe.Type, Error: msg}, nil
	}
	var te *client.TransportError
	if !errors.As(err, &te) {
		return spillway.SubmitReply{}, err
	}
	if via == "http" {
		return spillway.SubmitReply{}, unreachable(where, te.Err)
	}
	subject := spillway.SubmitPrefix + q
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return spillway.SubmitReply{}, fmt.Errorf("no admitter answers on %s at %s (is the admitter running and connected to this NATS server?)", subject, where)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return spillway.SubmitReply{}, fmt.Errorf("no answer on %s within the timeout (raise --timeout; the job may have been taken: resubmit with the same --idempotency-key)", subject)
	}
	return spillway.SubmitReply{}, fmt.Errorf("request on %s: %w", subject, te.Err)
}

// runJob is a command about one job, named by its one argument: it asks
// the admitter with call (the client's Status or Cancel) and prints the
// job's record.
func runJob(ctx context.Context, name, usage string, call func(*client.Client, context.Context, string) (*spillway.Job, error),
	args []string, getenv func(string) string, stdout io.Writer) error {
	g, done, err := parseGetter(name, usage, "job ID", true, args, getenv, stdout)
	if done || err != nil {
		return err
	}
	job, err := call(g.a.c, ctx, g.arg)
	if err != nil {
		err := g.a.explain(err)
		if isNotFound(err) {
			return fmt.Errorf("%s: the admitter at %s knows no job %q (ids are what spillctl submit prints)", name, g.a.base, g.arg)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return g.printJob(stdout, jobStatusOf(job))
}

// jobStatusOf is a job's record as spillctl prints it.
func jobStatusOf(j *spillway.Job) jobStatus {
	t := func(v time.Time) *time.Time {
		if v.IsZero() {
			return nil
		}
		return &v
	}
	return jobStatus{ID: j.ID, Queue: j.Queue, State: string(j.State), Attempts: j.Attempts, LastError: j.LastError,
		EnqueuedAt: t(j.EnqueuedAt), NotBefore: t(j.NotBefore), StartedAt: t(j.StartedAt), FinishedAt: t(j.FinishedAt), UpdatedAt: t(j.UpdatedAt)}
}
