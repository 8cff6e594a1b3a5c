package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/api"
	"github.com/spillway-dev/spillway/pkg/queue"
)

const submitUsage = `Usage: spillctl submit --queue Q [--data STRING | --file F] [flags]

Submits one job and prints the admitter's verdict:
  admitted id=0193…
  queued  id=0193…  position=3  not_before=12:00:05.200  (estimated start in 1.2s)
  rejected retry after 2.5s (queue-full)
The payload is --data, the contents of --file, or else stdin.

Exit code 0 when the job was admitted or queued, 3 when it was rejected
(retry after the time printed), 1 on any error (bad request, unknown queue,
no admitter, ...).

Examples:
  spillctl submit --queue email --data '{"to":"a@example.com"}' --header X-Api-Key=k1
  spillctl submit --queue email --file job.json --cost 5 --idempotency-key order-1234
  echo hi | spillctl submit --queue demo --via nats --json

Flags:
`

func runSubmit(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("spillctl submit", flag.ContinueOnError)
	q := fs.String("queue", "", "the `QUEUE` to submit to (required)")
	data := fs.String("data", "", "the payload, as a `STRING`")
	file := fs.String("file", "", "read the payload from `FILE` (- for stdin)")
	var headers headerFlags
	fs.Var(&headers, "header", "send a header, `NAME=VALUE`, such as the key your limits use (repeatable)")
	cost := fs.Int64("cost", 0, "`N` units the job takes from its limits, sent as Spillway-Cost (default: the admitter's, 1)")
	idem := fs.String("idempotency-key", "", "a `KEY` that makes a retried submit take no second unit or slot")
	via := fs.String("via", "http", "front `DOOR`: http | nats")
	server := serverFlag(fs, getenv)
	natsURL := natsFlag(fs, getenv)
	apiKey := apiKeyFlag(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`")
	asJSON := fs.Bool("json", false, "print the reply as JSON (api.SubmitReply)")
	pos, done, err := parseArgs(fs, args, submitUsage, stdout)
	if done || err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageErrorf("spillctl submit: unexpected argument %q: give the payload with --data, --file or stdin (see spillctl submit --help)", pos[0])
	case *q == "":
		return usageErrorf("spillctl submit: --queue is required (spillctl queues lists them)")
	case *data != "" && *file != "":
		return usageErrorf("spillctl submit: --data and --file both given: choose one")
	case *cost < 0:
		return usageErrorf("spillctl submit: --cost %d: must be ≥ 1", *cost)
	case *via != "http" && *via != "nats":
		return usageErrorf("spillctl submit: --via %q: want http or nats", *via)
	}
	if err := queue.ValidateQueueName(*q); err != nil {
		return usageErrorf("spillctl submit: --queue: %w", err)
	}
	payload := []byte(*data)
	switch {
	case *file != "" && *file != "-":
		if payload, err = os.ReadFile(*file); err != nil {
			return fmt.Errorf("spillctl submit: reading the payload: %w", err)
		}
	case *data == "":
		if isTerminal(stdin) {
			fmt.Fprintln(stderr, "spillctl submit: reading the payload from the terminal; end it with Ctrl-D (or use --data / --file)")
		}
		if payload, err = io.ReadAll(stdin); err != nil {
			return fmt.Errorf("spillctl submit: reading the payload from stdin: %w", err)
		}
	}
	key := *apiKey
	if key == "" {
		key = getenv("SPILLWAY_API_KEY")
	}
	sub := submission{queue: *q, payload: payload, headers: headers, cost: *cost, idempotencyKey: *idem, apiKey: key}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var rep api.SubmitReply
	if *via == "nats" {
		rep, err = sub.viaNATS(ctx, *natsURL)
	} else {
		rep, err = sub.viaHTTP(ctx, *server, *timeout)
	}
	if err != nil {
		return fmt.Errorf("spillctl submit: %w", err)
	}
	if *asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else if rep.Status != api.Failed {
		fmt.Fprintln(stdout, formatReply(rep, time.Now()))
	}
	switch rep.Status {
	case api.Admitted, api.Queued:
		return nil
	case api.Rejected:
		return errRejected
	}
	return fmt.Errorf("spillctl submit: %s", replyError(rep, *via))
}

// submission is one job to submit.
type submission struct {
	queue          string
	payload        []byte
	headers        headerFlags
	cost           int64
	idempotencyKey string
	apiKey         string
}

// viaHTTP posts the job. A 202 or 429 is a reply; other answers are turned
// into a reply with status "error" when they carry a problem document, and
// into an error otherwise.
func (s *submission) viaHTTP(ctx context.Context, server string, timeout time.Duration) (api.SubmitReply, error) {
	a, err := newAdmitter("spillctl submit", server, s.apiKey, timeout)
	if err != nil {
		return api.SubmitReply{}, err
	}
	h := http.Header{"Content-Type": {"application/octet-stream"}, "Accept": {"application/json"}}
	s.headers.each(func(k, v string) { h.Add(k, v) })
	if s.cost > 0 {
		h.Set(api.HeaderCost, strconv.FormatInt(s.cost, 10))
	}
	if s.idempotencyKey != "" {
		h.Set(api.HeaderIdempotencyKey, s.idempotencyKey)
	}
	ans, err := a.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(s.queue)+"/jobs", h, bytes.NewReader(s.payload))
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
	s.headers.each(func(k, v string) { m.Header.Add(k, v) })
	if s.cost > 0 {
		m.Header.Set(api.HeaderCost, strconv.FormatInt(s.cost, 10))
	}
	if s.idempotencyKey != "" {
		m.Header.Set(api.HeaderIdempotencyKey, s.idempotencyKey)
	}
	if s.apiKey != "" {
		m.Header.Set("Authorization", "Bearer "+s.apiKey)
	}
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

// connectNATS connects with a short timeout and an error that says what
// to do.
func connectNATS(natsURL, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(natsURL, nats.Name(name), nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w (is nats-server running? set --nats or $SPILLWAY_NATS_URL)", natsURL, err)
	}
	return nc, nil
}

// formatReply is the line printed for an admitted, queued or rejected
// job. Times are shown in now's time zone.
func formatReply(rep api.SubmitReply, now time.Time) string {
	var b strings.Builder
	switch rep.Status {
	case api.Admitted:
		fmt.Fprintf(&b, "admitted id=%s", rep.ID)
	case api.Queued:
		fmt.Fprintf(&b, "queued  id=%s", rep.ID)
		if rep.Position > 0 {
			fmt.Fprintf(&b, "  position=%d", rep.Position)
		}
		if rep.NotBefore != nil {
			fmt.Fprintf(&b, "  not_before=%s", fmtClock(*rep.NotBefore, now))
		}
		start := rep.EstimatedStart
		if start == nil {
			start = rep.NotBefore
		}
		if start != nil {
			if d := start.Sub(now); d > 0 {
				fmt.Fprintf(&b, "  (estimated start in %s)", fmtDur(d))
			} else {
				b.WriteString("  (estimated start now)")
			}
		}
	case api.Rejected:
		b.WriteString("rejected")
		if rep.RetryAfterMS > 0 {
			fmt.Fprintf(&b, " retry after %s", fmtDur(time.Duration(rep.RetryAfterMS)*time.Millisecond))
		}
		if rep.Type != "" {
			fmt.Fprintf(&b, " (%s)", api.ProblemReason(rep.Type))
		}
	default:
		fmt.Fprintf(&b, "%s id=%s", rep.Status, rep.ID)
	}
	if rep.Duplicate {
		b.WriteString("  (duplicate: the answer to an earlier submit with this idempotency key)")
	}
	return b.String()
}

// replyError explains a reply with status "error", with a hint by problem
// type.
func replyError(rep api.SubmitReply, via string) string {
	msg := rep.Error
	if msg == "" {
		msg = "the admitter did not take the job"
	}
	if rep.Status != api.Failed {
		msg = fmt.Sprintf("unexpected status %q in the reply", rep.Status)
	}
	switch rep.Type {
	case api.ProblemUnauthorized:
		msg += " (set --api-key or $SPILLWAY_API_KEY)"
	case api.ProblemNotFound:
		msg += " (see spillctl queues)"
	case api.ProblemBadKey:
		msg += " (send the header your limits key on, e.g. --header X-Api-Key=k1)"
	case api.ProblemBadCost:
		msg += " (--cost must be an integer ≥ 1 and within the limit's burst)"
	case api.ProblemTooLarge:
		msg += " (the payload exceeds the admitter's http.max_body_bytes)"
	case api.ProblemUnavailable:
		if via == "http" {
			msg += " (the admitter cannot reach NATS or its store; see its /readyz)"
		}
	}
	return msg
}
