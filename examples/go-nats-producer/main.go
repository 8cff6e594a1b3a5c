// Command go-nats-producer submits one job to a Spillway queue over the
// admitter's NATS door with pkg/client, prints the verdict, and with
// -wait asks the admitters for the job's status record
// (spillway.job.<id>) until it is final.
//
//	go run ./examples/go-nats-producer -nats nats://127.0.0.1:4222 -queue demo -data 'hello'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-nats-producer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("go-nats-producer", flag.ContinueOnError)
	url := fs.String("nats", nats.DefaultURL, "the NATS server's `URL`")
	queue := fs.String("queue", "demo", "the `QUEUE` to submit to")
	data := fs.String("data", "hello from Go", "the job's payload")
	keyHeader := fs.String("key-header", "X-Client-Id", "the `HEADER` the queue's limits key on")
	key := fs.String("key", "tenant-1", "the client `KEY` sent in -key-header (empty: none)")
	wait := fs.Bool("wait", false, "wait for the job to finish and print its final state")
	if err := fs.Parse(args); err != nil {
		return err
	}

	nc, err := nats.Connect(*url, nats.Name("go-nats-producer"), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	c, err := client.NewNATS(nc)
	if err != nil {
		return err
	}
	var submit []client.SubmitOption
	if *key != "" {
		submit = append(submit, client.WithHeader(*keyHeader, *key))
	}
	ans, err := c.Submit(ctx, *queue, []byte(*data), submit...)
	if errors.Is(err, client.ErrRejected) {
		fmt.Fprintf(stdout, "rejected (%v): retry after %v\n", err, ans.RetryAfter)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s id=%s\n", ans.Verdict, ans.ID)
	if ans.Verdict == spillway.Queued {
		fmt.Fprintf(stdout, "  position %d, estimated start %s\n", ans.Position, ans.EstimatedStart.Format(time.RFC3339))
	}
	if !*wait {
		return nil
	}
	job, err := c.Wait(ctx, ans.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s after %d attempt(s)\n", job.State, job.Attempts)
	if job.LastError != "" {
		fmt.Fprintf(stdout, "  last error: %s\n", job.LastError)
	}
	return nil
}
