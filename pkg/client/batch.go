package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// MaxBatch is the most jobs one batch may carry.
const MaxBatch = spillway.MaxBatchJobs

// BatchJob is one job of a batch: its payload and the options a single
// submission would take.
type BatchJob struct {
	Payload []byte
	Options []SubmitOption
}

// BatchResult is one job's outcome in a batch: Answer and Err as Submit
// would return them for that job alone (a rejected job has both).
type BatchResult struct {
	Answer *Answer
	Err    error
}

// SubmitBatch sends up to MaxBatch jobs to queue in one request (POST
// /v1/queues/{queue}/jobs:batch, or spillway.submitbatch.<queue>) and
// returns one result per job, in order. Each job is decided on its own,
// as if submitted alone: some may be admitted and others rejected. The
// error is the batch's own — unreadable, too large, unauthorized, an
// unknown queue, or no answer — and then there are no results.
//
// Every job gets its own generated idempotency key unless it has one, so
// a batch that is sent again after a lost answer, or a 503, takes none of
// its jobs twice: those taken come back as duplicates.
func (c *Client) SubmitBatch(ctx context.Context, queue string, jobs []BatchJob) ([]BatchResult, error) {
	b, err := c.PrepareBatch(jobs)
	if err != nil {
		return nil, err
	}
	return c.SubmitPrepared(ctx, queue, b)
}

// PreparedBatch is a batch encoded once, to send as it is with
// SubmitPrepared. Its jobs' idempotency keys are fixed when it is
// prepared: sent again, the jobs that were taken are duplicates. A load
// generator that sends one batch many times prepares it on a client made
// WithoutIdempotencyKeys.
type PreparedBatch struct {
	body []byte
	keys []string
}

// Len is the number of jobs in the batch.
func (b *PreparedBatch) Len() int { return len(b.keys) }

// PrepareBatch encodes jobs as SubmitBatch sends them: 1 to MaxBatch
// jobs, each payload as text when it is UTF-8 and in base64 otherwise.
func (c *Client) PrepareBatch(jobs []BatchJob) (*PreparedBatch, error) {
	if len(jobs) == 0 || len(jobs) > MaxBatch {
		return nil, fmt.Errorf("%w: a batch of %d jobs: want 1 to %d", ErrInvalidOption, len(jobs), MaxBatch)
	}
	wire := make([]spillway.BatchJob, len(jobs))
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		s, err := newSubmission(j.Options, !c.cfg.noAutoKeys)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		h := make(map[string]string, len(s.headers)+1)
		for _, kv := range s.headers {
			h[kv[0]] = kv[1]
		}
		if s.key != "" {
			h[spillway.HeaderIdempotencyKey] = s.key
		}
		keys[i] = s.key
		wire[i].Headers = h
		if utf8.Valid(j.Payload) {
			p := string(j.Payload)
			wire[i].Payload = &p
		} else {
			p := base64.StdEncoding.EncodeToString(j.Payload)
			wire[i].PayloadBase64 = &p
		}
	}
	body, err := json.Marshal(wire)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the batch: %w", err)
	}
	return &PreparedBatch{body: body, keys: keys}, nil
}

// SubmitPrepared sends a prepared batch to queue, as SubmitBatch does.
func (c *Client) SubmitPrepared(ctx context.Context, queue string, b *PreparedBatch) ([]BatchResult, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	keyed := true
	for _, k := range b.keys {
		keyed = keyed && k != ""
	}
	var rep *spillway.BatchReply
	attempts, err := c.retrying(ctx, keyed, func(ctx context.Context) error {
		var err error
		rep, err = c.t.submitBatch(ctx, queue, b.body)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(rep.Results) != len(b.keys) {
		return nil, fmt.Errorf("client: a batch of %d jobs answered with %d results", len(b.keys), len(rep.Results))
	}
	out := make([]BatchResult, len(rep.Results))
	for i := range rep.Results {
		r := &rep.Results[i].SubmitReply
		if r.Queue == "" {
			r.Queue = queue
		}
		switch r.Status {
		case spillway.Admitted, spillway.Queued, spillway.Rejected:
			a := answerOf(r, b.keys[i], rep.Results[i].Shadow)
			a.Attempts = attempts
			out[i].Answer = a
			if a.Verdict == spillway.Rejected {
				out[i].Err = a.rejection()
			}
		default:
			out[i].Err = replyError(r.Queue, r.ID, r.Type, r.Error, "", r.RetryAfterMS)
		}
	}
	return out, nil
}
