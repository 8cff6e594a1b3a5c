package main

import (
	"context"
	"fmt"
	"io"
)

const cancelUsage = `Usage: spillctl cancel ID [--server URL] [--api-key KEY] [--json]

Cancels a queued job with the admitter's DELETE /v1/jobs/{id}: the job
leaves the backlog and never runs, its key's place there is free at once,
and its status becomes cancelled. Only a queued job can be cancelled: one
that is admitted (it starts at once), running, done, dead or cancelled
already is refused with its state (exit status 1).

Examples:
  spillctl cancel 0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77
  spillctl cancel 0193a5c2-7d1e-7b3a-9f00-5d2c1e4b8a77 --json

Flags:
`

func runCancel(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	g, done, err := parseGetter("spillctl cancel", cancelUsage, "job ID", true, args, getenv, stdout)
	if done || err != nil {
		return err
	}
	c, err := g.a.jobsClient()
	if err != nil {
		return fmt.Errorf("spillctl cancel: %w", err)
	}
	job, err := c.Cancel(ctx, g.arg)
	if err != nil {
		err := g.a.jobError(err)
		if isNotFound(err) {
			return fmt.Errorf("spillctl cancel: the admitter at %s knows no job %q (ids are what spillctl submit prints)", g.a.base, g.arg)
		}
		return fmt.Errorf("spillctl cancel: %w", err)
	}
	return g.printJob(stdout, jobStatusOf(job))
}
