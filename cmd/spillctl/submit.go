package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
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
	idem := fs.String("idempotency-key", "", "a `KEY` that makes a retried submit take no second unit or slot (default: a generated one, reused by spillctl's own retries)")
	via := fs.String("via", "http", "front `DOOR`: http | nats")
	conn := addAPIFlags(fs, getenv)
	natsURL := natsFlag(fs, getenv)
	asJSON := fs.Bool("json", false, "print the reply as JSON (spillway.SubmitReply)")
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
	if err := spillway.ValidateQueueName(*q); err != nil {
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
	opts := submitOptions(headers, *cost)
	if *idem != "" {
		opts = append(opts, client.WithIdempotencyKey(*idem))
	}
	ctx, cancel := context.WithTimeout(ctx, *conn.timeout)
	defer cancel()
	var c *client.Client
	where := natsShown(*natsURL)
	if *via == "nats" {
		var closeConn func()
		opts := append(keyOption(keyOr(*conn.apiKey, getenv)), client.WithTimeout(*conn.timeout))
		if c, closeConn, err = natsClient(*natsURL, "spillctl submit", getenv, opts...); err != nil {
			return fmt.Errorf("spillctl submit: %w", err)
		}
		defer closeConn()
	} else {
		a, err := conn.admitter("spillctl submit", getenv)
		if err != nil {
			return err
		}
		c, where = a.c, a.base
	}
	ans, err := c.Submit(ctx, *q, payload, opts...)
	rep, err := replyOf(*q, ans, err, *via, where)
	if err != nil {
		return fmt.Errorf("spillctl submit: %w", err)
	}
	if *asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else if rep.Status != spillway.Failed {
		fmt.Fprintln(stdout, formatReply(rep, time.Now()))
	}
	switch rep.Status {
	case spillway.Admitted, spillway.Queued:
		return nil
	case spillway.Rejected:
		return errRejected
	}
	return fmt.Errorf("spillctl submit: %s", replyError(rep, *via))
}

// formatReply is the line printed for an admitted, queued or rejected
// job. Times are shown in now's time zone.
func formatReply(rep spillway.SubmitReply, now time.Time) string {
	var b strings.Builder
	switch rep.Status {
	case spillway.Admitted:
		fmt.Fprintf(&b, "admitted id=%s", rep.ID)
	case spillway.Queued:
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
	case spillway.Rejected:
		b.WriteString("rejected")
		if rep.RetryAfterMS > 0 {
			fmt.Fprintf(&b, " retry after %s", fmtDur(time.Duration(rep.RetryAfterMS)*time.Millisecond))
		}
		if rep.Type != "" {
			fmt.Fprintf(&b, " (%s)", spillway.ProblemReason(rep.Type))
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
func replyError(rep spillway.SubmitReply, via string) string {
	msg := rep.Error
	if msg == "" {
		msg = "the admitter did not take the job"
	}
	if rep.Status != spillway.Failed {
		msg = fmt.Sprintf("unexpected status %q in the reply", rep.Status)
	}
	switch rep.Type {
	case spillway.ProblemUnauthorized:
		msg += " (set --api-key or $SPILLWAY_API_KEY)"
	case spillway.ProblemNotFound:
		msg += " (see spillctl queues)"
	case spillway.ProblemBadKey:
		msg += " (send the header your limits key on, e.g. --header X-Api-Key=k1)"
	case spillway.ProblemBadCost:
		msg += " (--cost must be an integer ≥ 1 and within the limit's burst)"
	case spillway.ProblemTooLarge:
		msg += " (the payload exceeds the admitter's http.max_body_bytes)"
	case spillway.ProblemUnavailable:
		if via == "http" {
			msg += " (the admitter cannot reach NATS or its store; see its /readyz)"
		}
	}
	return msg
}
