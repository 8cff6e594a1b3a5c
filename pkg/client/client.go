package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Client submits jobs to a Spillway admitter and follows them, over one of
// its two front doors: HTTP (NewHTTP) or NATS request-reply (NewNATS).
// Both answer alike. A Client is safe for concurrent use; make one and
// share it.
type Client struct {
	cfg config
	t   transport
}

// transport is one door: each method is one attempt.
type transport interface {
	submit(ctx context.Context, queue string, payload []byte, s *submission) (*Answer, error)
	submitBatch(ctx context.Context, queue string, body []byte) (*spillway.BatchReply, error)
	status(ctx context.Context, id string) (*spillway.Job, error)
	cancel(ctx context.Context, id string) (*spillway.Job, error)
	// describe names the door in errors: the base URL, the NATS server.
	describe() string
	// name is the door's: "http" or "nats".
	name() string
}

// Submit sends one job to queue and returns the admitter's answer.
//
// An admitted or queued job returns its Answer and a nil error. A rejected
// one returns both: its Answer (Verdict spillway.Rejected, RetryAfter, Problem) and
// a *ProblemError that matches ErrRejected and the reason (ErrRateLimited,
// ErrQueueFull, ErrKeyFull, ErrWaitTooLong), so that a caller who checks
// only the error never takes a rejection for a job taken. Any other
// answer returns a nil Answer and a *ProblemError (errors.Is
// ErrBadRequest, ErrUnauthorized, ErrNotFound, ErrTooLarge, ...); no
// answer at all is a *TransportError.
//
// Each submission carries an idempotency key, generated (a UUIDv7) unless
// WithIdempotencyKey gives one. A submission that got no answer, or a
// 503, is sent again with the same key (WithRetries): a job taken though
// its answer was lost comes back as a Duplicate answer, never as a
// second job.
func (c *Client) Submit(ctx context.Context, queue string, payload []byte, opts ...SubmitOption) (*Answer, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	s, err := newSubmission(opts, !c.cfg.noAutoKeys)
	if err != nil {
		return nil, err
	}
	var ans *Answer
	attempts, err := c.retrying(ctx, s.key != "", func(ctx context.Context) error {
		var err error
		ans, err = c.t.submit(ctx, queue, payload, &s)
		return err
	})
	if ans != nil {
		ans.Attempts = attempts
		if ans.Verdict == spillway.Rejected {
			return ans, ans.rejection()
		}
	}
	return ans, err
}

func checkQueue(name string) error {
	if err := spillway.ValidateQueueName(name); err != nil {
		return fmt.Errorf("%w: queue: %w", ErrInvalidOption, err)
	}
	return nil
}

// retrying runs attempt, once more after each transport error (when
// afterLoss: the request may have been taken) or 503, up to the
// configured retries, and returns how many attempts it made and the last
// one's error. Each attempt is bounded by the client's timeout.
func (c *Client) retrying(ctx context.Context, afterLoss bool, attempt func(context.Context) error) (int, error) {
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
		err := attempt(actx)
		cancel()
		if err == nil || n > c.cfg.retries || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return n, err
		}
		var te *TransportError
		var pe *ProblemError
		var wait time.Duration
		switch {
		case errors.As(err, &te) && afterLoss:
		case errors.As(err, &pe) && pe.Status == http.StatusServiceUnavailable:
			wait = pe.RetryAfter
		default:
			return n, err
		}
		// Jitter takes up to a fifth off the exact delay.
		d := backoff(c.cfg.backoff, n)
		d -= time.Duration(rand.Int64N(int64(d)/5 + 1))
		if wait > d && wait < 5*time.Second {
			d = wait
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return n, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// backoff is the exact wait after attempt n (from 1): initial, doubling
// after each attempt, up to a second (or initial, if that is longer).
func backoff(initial time.Duration, n int) time.Duration {
	initial = max(initial, time.Nanosecond)
	limit := max(time.Second, initial)
	d := initial
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Status reads job id's status record. A job whose record is unknown or
// expired is ErrNotFound.
func (c *Client) Status(ctx context.Context, id string) (*spillway.Job, error) {
	return c.jobCall(ctx, id, true, c.t.status)
}

// jobCall runs call about job id through retrying (afterLoss as there)
// and returns the job it answered.
func (c *Client) jobCall(ctx context.Context, id string, afterLoss bool, call func(context.Context, string) (*spillway.Job, error)) (*spillway.Job, error) {
	var job *spillway.Job
	_, err := c.retrying(ctx, afterLoss, func(ctx context.Context) error {
		var err error
		job, err = call(ctx, id)
		return err
	})
	return job, err
}

// Wait blocks until job id reaches a final state — succeeded, dead,
// expired, cancelled or superseded — and returns its record, or until ctx ends. It
// reads the record as Status does, every poll interval
// (WithPollInterval), on either door: GET /v1/jobs/{id}, or a request on
// spillway.job.<id>. A job without a record for a few seconds (its first
// record is written just after the answer) is ErrNotFound; reads that get
// no answer or a 503 are waited out. A job that is dead or expired is not
// an error: the record's State says so.
func (c *Client) Wait(ctx context.Context, id string) (*spillway.Job, error) {
	start := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
		job, err := c.t.status(rctx, id)
		cancel()
		var pe *ProblemError
		var te *TransportError
		switch {
		case err == nil && job.State.Final():
			return job, nil
		case err == nil:
		case errors.As(err, &pe) && pe.Status == http.StatusNotFound && time.Since(start) < notFoundGrace:
		case errors.As(err, &pe) && pe.Status == http.StatusServiceUnavailable, errors.As(err, &te) && ctx.Err() == nil:
		default:
			return nil, err
		}
		t.Reset(c.cfg.poll)
	}
}

// Cancel takes a queued job out of the backlog: it never runs, and its
// record becomes cancelled, which Cancel returns. A job that is not
// queued (admitted jobs start at once; a running or finished one is past
// cancelling) is a *ProblemError matching ErrConflict, its State the
// job's state.
func (c *Client) Cancel(ctx context.Context, id string) (*spillway.Job, error) {
	// Not resent after a lost answer: the second cancel of a job that
	// the first one cancelled would be refused as a conflict.
	return c.jobCall(ctx, id, false, c.t.cancel)
}

// Door is the front door the client uses: "http" or "nats".
func (c *Client) Door() string { return c.t.name() }

// String names the admitter the client talks to.
func (c *Client) String() string { return c.t.describe() }

// notFoundGrace is how long Wait waits for a job's first record.
const notFoundGrace = 5 * time.Second
