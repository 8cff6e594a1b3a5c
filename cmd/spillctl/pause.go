package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spillway-dev/spillway/internal/api"
)

const pauseUsage = `Usage: spillctl pause QUEUE [--reason R] [--server URL] [--admin-key KEY] [--json]

Pauses a queue with the admitter's POST /v1/queues/{queue}/pause
(docs/design.md#pause): within a second its workers start none of its
jobs, admitted or queued, until "spillctl resume QUEUE". Admission goes
on: jobs wait in READY and the backlog, whose bound holds; nothing is
lost. Pausing a paused queue changes nothing. The call takes an admin key,
one of the admitter's http.admin_keys_file.

Examples:
  spillctl pause email --reason "mail provider maintenance"
  SPILLWAY_ADMIN_KEY=... spillctl pause email --json

Flags:
`

const resumeUsage = `Usage: spillctl resume QUEUE [--server URL] [--admin-key KEY] [--json]

Resumes a paused queue with the admitter's POST /v1/queues/{queue}/resume:
its workers start its jobs again, the backlog's at the leak rate. It
takes an admin key, one of the admitter's http.admin_keys_file.

Examples:
  spillctl resume email

Flags:
`

func runPause(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return pauseOrResume(ctx, "pause", pauseUsage, args, getenv, stdout)
}

func runResume(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return pauseOrResume(ctx, "resume", resumeUsage, args, getenv, stdout)
}

func pauseOrResume(ctx context.Context, verb, usage string, args []string, getenv func(string) string, stdout io.Writer) error {
	name := "spillctl " + verb
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	server := serverFlag(fs, getenv)
	adminKey := fs.String("admin-key", "", "send Authorization: Bearer `KEY`, an admin key (default $SPILLWAY_ADMIN_KEY)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`")
	asJSON := fs.Bool("json", false, "print the admitter's JSON as it is")
	var reason *string
	if verb == "pause" {
		reason = fs.String("reason", "", "why, kept with the pause and shown by spillctl queues (at most 200 characters)")
	}
	pos, done, err := parseArgs(fs, args, usage, stdout)
	if done || err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("%s: want one queue name, got %d arguments (see %s --help)", name, len(pos), name)
	}
	key := *adminKey
	if key == "" {
		key = getenv("SPILLWAY_ADMIN_KEY")
	}
	a, err := newAdmitter(name, *server, key, *timeout)
	if err != nil {
		return err
	}
	var body io.Reader
	if reason != nil && *reason != "" {
		b, _ := json.Marshal(api.PauseRequest{Reason: *reason})
		body = bytes.NewReader(b)
	}
	ans, err := a.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(pos[0])+"/"+verb,
		http.Header{"Accept": {"application/json"}, "Content-Type": {"application/json"}}, body)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ans.StatusCode != http.StatusOK {
		err := a.answerError(ans)
		switch {
		case isNotFound(err):
			return fmt.Errorf("%s: the admitter at %s has no queue %q (spillctl queues lists them)", name, a.base, pos[0])
		case ans.StatusCode == http.StatusUnauthorized || ans.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%s: %w; pause and resume take an admin key: set --admin-key or $SPILLWAY_ADMIN_KEY", name, err)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	var rep api.PauseReply
	if err := json.Unmarshal(ans.Body, &rep); err != nil {
		return fmt.Errorf("%s: the admitter at %s answered with something that is not a pause state: %w (is --server an admitter?)", name, a.base, err)
	}
	if *asJSON {
		return writeRaw(stdout, ans.Body)
	}
	state := "resumed"
	if rep.Paused {
		state = "paused"
	}
	line := fmt.Sprintf("%s: %s since %s by %s", rep.Queue, state, rep.At.Local().Format(time.DateTime), rep.By)
	if rep.Reason != "" {
		line += fmt.Sprintf(" (%s)", rep.Reason)
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}
