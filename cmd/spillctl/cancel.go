package main

import (
	"context"
	"io"

	"github.com/spillway-dev/spillway/pkg/client"
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
	return runJob(ctx, "spillctl cancel", cancelUsage, (*client.Client).Cancel, args, getenv, stdout)
}
