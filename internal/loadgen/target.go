package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// SubmitTarget submits jobs with a client.Client, over whichever door it
// was made for (docs/design.md#doors): Payload to Queue with Options, and
// the request's key in KeyHeader. Make the client WithRetries(0, 0), so
// that each job is one exchange whose outcome is counted, and
// WithoutIdempotencyKeys, so that the admitter's path is the plain one
// (unless the run means to measure idempotent submissions).
type SubmitTarget struct {
	Client *client.Client
	Queue  string
	// Options are every job's (client.WithCost, client.WithHeader, ...).
	Options []client.SubmitOption
	// KeyHeader carries Request.Key (nothing is sent for an empty key).
	KeyHeader string
	Payload   []byte

	// withKey holds Options and the key's header, by key: a run's keys
	// are few and each job's options are built once per key, not per job.
	withKey sync.Map
}

// options is the options of a job sent under key.
func (t *SubmitTarget) options(key string) []client.SubmitOption {
	if key == "" || t.KeyHeader == "" {
		return t.Options
	}
	if v, ok := t.withKey.Load(key); ok {
		return v.([]client.SubmitOption)
	}
	opts := slices.Concat(t.Options, []client.SubmitOption{client.WithHeader(t.KeyHeader, key)})
	t.withKey.Store(key, opts)
	return opts
}

// Submit sends one job and classifies the answer (Classify).
func (t *SubmitTarget) Submit(ctx context.Context, r Request) Outcome {
	ans, err := t.Client.Submit(ctx, t.Queue, t.Payload, t.options(r.Key)...)
	return Classify(t.Client.Door(), ans, err)
}

// Classify turns a submission's answer and error, as client.Submit
// returns them, into an Outcome: no error is the answer's verdict
// (admitted or queued), a
// rejection is Rejected with its problem's reason ("queue-full"), and
// anything else is Failed with a reason from a small set: the problem's
// reason ("unavailable"; on the HTTP door with its status, "http 503
// unavailable"), or the transport's ("timeout", "connection refused",
// "no responders").
func Classify(door string, ans *client.Answer, err error) Outcome {
	if err == nil {
		if ans != nil && ans.Verdict == spillway.Queued {
			return Outcome{Verdict: Queued}
		}
		return Outcome{Verdict: Admitted}
	}
	return classifyError(door, err)
}

// classifyError is Classify of an error: apart, so that answers without
// one cost no allocation.
func classifyError(door string, err error) Outcome {
	var pe *client.ProblemError
	switch {
	case errors.As(err, &pe) && pe.Status == 429:
		reason := pe.Reason()
		if reason == "" {
			reason = "429"
		}
		return Outcome{Rejected, reason}
	case errors.As(err, &pe):
		reason := pe.Reason()
		if door == "http" {
			reason = "http " + strconv.Itoa(pe.Status)
			if r := pe.Reason(); r != "" {
				reason += " " + r
			}
		}
		if reason == "" {
			reason = "error"
		}
		return Outcome{Failed, reason}
	case errors.Is(err, client.ErrInvalidOption):
		return Outcome{Failed, "bad request"}
	}
	var te *client.TransportError
	if errors.As(err, &te) {
		return Outcome{Failed, transportReason(err)}
	}
	return Outcome{Failed, "bad reply"}
}

// transportReason names a failed exchange in a word or two.
func transportReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, nats.ErrNoResponders):
		return "no responders"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return "connection closed"
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset"
	}
	return "transport"
}

// RoundRobin spreads submissions over its targets in turn, by their
// number in the run: two admitters, each with its own HTTP address, take
// half the load each (over NATS the admitters' queue group spreads it).
// It does not spread batches (JobsTarget).
type RoundRobin []Target

// Submit sends r to the target whose turn it is.
func (rr RoundRobin) Submit(ctx context.Context, r Request) Outcome {
	return rr[uint64(r.Seq)%uint64(len(rr))].Submit(ctx, r)
}
