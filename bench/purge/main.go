// Command purge empties JetStream streams: the benchmark scripts run it
// between runs, so that each run starts from the same empty READY and
// status buckets rather than from the messages the runs before it stored.
//
//	go run ./bench/purge --nats nats://127.0.0.1:4222 SPILLWAY_bench_READY 'KV_spillway-jobs-*'
//
// A name ending in '*' is a prefix: every stream whose name starts with it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	url := fs.String("nats", nats.DefaultURL, "NATS server `URL`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: purge [--nats URL] STREAM|PREFIX* ...\n\nEmpties the named JetStream streams (a name ending in '*': every stream it begins).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	if err := run(*url, fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "purge:", err)
		os.Exit(1)
	}
}

func run(url string, names []string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w (is nats-server running there?)", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var all []string
	lister := js.StreamNames(ctx)
	for name := range lister.Name() {
		all = append(all, name)
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("listing streams: %w", err)
	}
	purged := 0
	for _, want := range names {
		prefix, isPrefix := strings.CutSuffix(want, "*")
		found := false
		for _, name := range all {
			if match := name == want || isPrefix && strings.HasPrefix(name, prefix); !match {
				continue
			}
			found = true
			s, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			if err := s.Purge(ctx); err != nil {
				return fmt.Errorf("purging %s: %w", name, err)
			}
			purged++
		}
		if !found {
			return fmt.Errorf("no stream %q", want)
		}
	}
	fmt.Printf("purged %d streams\n", purged)
	return nil
}
