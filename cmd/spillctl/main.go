// Command spillctl is Spillway's command-line tool. Today it has one command,
// simulate, which replays arrivals through one limit offline (DESIGN §7).
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
		if !errors.Is(err, errUsageShown) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
}

// errUsageShown ends a run whose usage text was already printed for a
// mistake.
var errUsageShown = errors.New("usage shown")

const usage = `spillctl — Spillway's command-line tool

Usage:
  spillctl <command> [flags]

Commands:
  simulate   replay arrivals from stdin through one limit, offline, with a
             simulated clock; prints admitted / queued / rejected per line

Run "spillctl <command> --help" for a command's flags.
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
	case "simulate":
		return runSimulate(ctx, args[1:], getenv, stdin, stdout, stderr)
	}
	return fmt.Errorf("spillctl: unknown command %q; the commands are: simulate (see spillctl --help)", args[0])
}
