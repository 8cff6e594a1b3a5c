package loadgen

import (
	"context"
	"sync"

	"github.com/spillway-dev/spillway/pkg/client"
)

// Batch describes the batch submissions (docs/design.md#batches) of a
// BatchTarget: Size jobs each, the same payload and headers, the client
// keys taken in turn from Keys (job i of request Seq gets
// Keys[(Seq·Size+i) mod len]) in KeyHeader. A run's Counts then count
// jobs, and its latencies are those of whole batches.
type Batch struct {
	Size      int
	Keys      []string
	KeyHeader string
	// Options are every job's (client.WithCost, client.WithHeader, ...).
	Options []client.SubmitOption
	Payload []byte

	prepared sync.Map // first key's index → *client.PreparedBatch
}

// batch is request r's batch, prepared once per first key.
func (b *Batch) batch(c *client.Client, r Request) (*client.PreparedBatch, error) {
	off := 0
	if n := len(b.Keys); n > 0 {
		off = int((r.Seq * int64(b.Size)) % int64(n))
	}
	if v, ok := b.prepared.Load(off); ok {
		return v.(*client.PreparedBatch), nil
	}
	common := b.Options
	jobs := make([]client.BatchJob, b.Size)
	for i := range jobs {
		opts := common[:len(common):len(common)]
		if n := len(b.Keys); n > 0 && b.KeyHeader != "" {
			opts = append(opts, client.WithHeader(b.KeyHeader, b.Keys[(off+i)%n]))
		}
		jobs[i] = client.BatchJob{Payload: b.Payload, Options: opts}
	}
	pb, err := c.PrepareBatch(jobs)
	if err != nil {
		return nil, err
	}
	b.prepared.Store(off, pb)
	return pb, nil
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

// BatchTarget sends batches with a client.Client, to POST
// /v1/queues/{queue}/jobs:batch or spillway.submitbatch.<queue>. Make the
// client as SubmitTarget's.
type BatchTarget struct {
	Client *client.Client
	Queue  string
	Batch  *Batch
}

// Submit sends one batch and classifies its first job (SubmitJobs has them
// all).
func (t *BatchTarget) Submit(ctx context.Context, r Request) Outcome {
	jobs := t.SubmitJobs(ctx, r)
	if len(jobs) == 0 {
		return Outcome{Verdict: Failed, Reason: "canceled"}
	}
	return jobs[0]
}

// SubmitJobs sends one batch and classifies its jobs; a batch refused
// whole, or not answered, fails each of its jobs with the batch's reason.
func (t *BatchTarget) SubmitJobs(ctx context.Context, r Request) []Outcome {
	door := t.Client.Door()
	pb, err := t.Batch.batch(t.Client, r)
	if err != nil {
		return t.Batch.all(Classify(door, nil, err))
	}
	results, err := t.Client.SubmitPrepared(ctx, t.Queue, pb)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return t.Batch.all(Classify(door, nil, err))
	}
	jobs := make([]Outcome, len(results))
	for i, res := range results {
		// A job's own error reads as the NATS door's reply: its reason
		// alone, whatever the door.
		jobs[i] = Classify("", res.Answer, res.Err)
	}
	return jobs
}
