// Command spillctl is Spillway's command-line tool: submit jobs, look at
// jobs and queues, watch them live, manage dead letters, load-test an
// admitter and simulate limits offline (docs/design.md#commands). Run "spillctl --help".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code, msg := exitStatus(err)
		if msg != "" {
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(code)
	}
}

// Exit codes (documented in usage).
const (
	exitFailure  = 1
	exitUsage    = 2
	exitRejected = 3
)

// errUsageShown ends a run whose usage text was already printed for a
// mistake.
var errUsageShown = errors.New("usage shown")

// exitError ends spillctl with code; err, if any, is what is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a mistake in the command line: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// errRejected ends a submit whose job was rejected; the verdict is already
// printed.
var errRejected = &exitError{code: exitRejected}

// exitStatus is the exit code for err and the message to print ("" for
// none).
func exitStatus(err error) (int, string) {
	var ee *exitError
	switch {
	case errors.Is(err, errUsageShown):
		return exitUsage, ""
	case errors.As(err, &ee):
		if ee.err == nil {
			return ee.code, ""
		}
		return ee.code, ee.err.Error()
	}
	return exitFailure, err.Error()
}

const usage = `spillctl — Spillway's command-line tool

Usage:
  spillctl <command> [flags]

Commands:
  submit     submit one job over HTTP or NATS and print its verdict
  status     show a job's state, attempts, last error and times
  cancel     take a queued job out of the backlog: it never runs
  queues     list queues: depth, capacity, leak rate, in flight, dead, paused
  pause      pause a queue: its workers start none of its jobs (admin key)
  resume     resume a paused queue (admin key)
  weights    fairness weights of a queue's drain: list, get, set, rm (admin key)
  limits     per-key limit overrides: list, get, set, rm (admin key)
  concurrency  per-key concurrency overrides: list, get, set, rm (admin key)
  top        live view of the queues with per-second rates (Ctrl-C to quit)
  dlq        dead letters: list, replay to READY or the backlog, purge
  bench      load-test an admitter: closed or open loop, latency percentiles
  simulate   replay arrivals from stdin through one limit, offline, with a
             simulated clock; prints admitted / queued / rejected per line
  probe      GET a URL, exit 0 on 2xx: the health check of shell-less images

Where things are (flags override the environment):
  --server URL     admitter HTTP API   $SPILLWAY_SERVER    (http://127.0.0.1:8080)
  --nats URL       NATS server         $SPILLWAY_NATS_URL  (nats://127.0.0.1:4222)
  --api-key KEY    Bearer token        $SPILLWAY_API_KEY
  --admin-key KEY  pause, resume, limits, concurrency, weights $SPILLWAY_ADMIN_KEY

Output is for people by default; --json prints one JSON document for
programs instead.

Exit codes:
  0  success (submit: admitted or queued)
  1  failure: the error says what happened and what to do
  2  a mistake on the command line
  3  submit: the job was rejected (the line says when to retry)

Run "spillctl <command> --help" for a command's flags and examples.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsageShown
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "submit":
		return runSubmit(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], getenv, stdout)
	case "cancel":
		return runCancel(ctx, args[1:], getenv, stdout)
	case "queues":
		return runQueues(ctx, args[1:], getenv, stdout)
	case "pause":
		return runPause(ctx, args[1:], getenv, stdout)
	case "resume":
		return runResume(ctx, args[1:], getenv, stdout)
	case "weights":
		return runWeights(ctx, args[1:], getenv, stdout)
	case "limits":
		return runLimits(ctx, args[1:], getenv, stdout)
	case "concurrency":
		return runConcurrency(ctx, args[1:], getenv, stdout)
	case "top":
		return runTop(ctx, args[1:], getenv, stdout)
	case "dlq":
		return runDLQ(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], getenv, stdout, stderr)
	case "simulate":
		return runSimulate(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "probe":
		return runProbe(ctx, args[1:], stdout)
	}
	return usageErrorf("spillctl: unknown command %q; the commands are: submit, status, cancel, queues, pause, resume, limits, concurrency, weights, top, dlq, bench, simulate, probe (see spillctl --help)", args[0])
}
