package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/simulate"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

const simulateUsage = `Usage: spillctl simulate --algorithm ALG [limit flags] [--store memory|redis] [--summary] < arrivals

Replays arrivals through one limit with a simulated clock and prints one line
per arrival:
  <n> <seconds> admitted
  <n> <seconds> queued <start_seconds>
  <n> <seconds> rejected
There is no backlog here: a job the limit would send to the backlog is printed
as rejected.

Input (stdin), one arrival per line: "<seconds> [key]" — decimal seconds,
never decreasing; key defaults to "default"; blank lines and # comments are
ignored.

Limit flags:
  leaky_bucket (default):  --rate 1/s --burst 2 [--delay 1 | --nodelay]   (delay 0 like nginx)
  token_bucket:            --rate 10/s --burst 20
  fixed_window, sliding_log, sliding_window:  --limit 100 --window 60s

Examples:
  printf '0\n0\n0\n0\n' | spillctl simulate --algorithm leaky_bucket --rate 1/s --burst 2
  spillctl simulate --algorithm sliding_window --limit 100 --window 60s --summary < arrivals.txt
  spillctl simulate --rate 1/s --burst 2 --store redis --redis redis://127.0.0.1:6379/0 < arrivals.txt

Flags:
`

func runSimulate(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("spillctl simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var spec bucket.Spec
	fs.StringVar(&spec.Algorithm, "algorithm", "leaky_bucket", "`ALG`: leaky_bucket | token_bucket | fixed_window | sliding_log | sliding_window")
	fs.StringVar(&spec.Rate, "rate", "", "`RATE` of a leaky or token bucket: 10/s, 600/m, 1/h, 5/10s")
	fs.Int64Var(&spec.Burst, "burst", 0, "`N`: the burst of a leaky bucket, capacity of a token bucket")
	fs.Int64Var(&spec.Delay, "delay", 0, "leaky_bucket: excess up to `N` jobs is admitted without delay")
	fs.BoolVar(&spec.NoDelay, "nodelay", false, "leaky_bucket: delay = burst")
	fs.Int64Var(&spec.Limit, "limit", 0, "window algorithms: `N` jobs per window")
	fs.StringVar(&spec.Window, "window", "", "window algorithms: window length `D`, a Go duration such as 60s")
	store := fs.String("store", "memory", "`STORE`: memory | redis: decide with the in-process store or the Redis scripts")
	redisURL := fs.String("redis", "", "Redis `URL` for --store redis (default $SPILLWAY_REDIS_URL or redis://127.0.0.1:6379/0)")
	summary := fs.Bool("summary", false, "after the lines, print counts, the deepest queue and wait percentiles")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printFlags(stdout, fs, simulateUsage)
			return nil
		}
		return usageErrorf("spillctl simulate: %w (see spillctl simulate --help)", err)
	}
	if fs.NArg() > 0 {
		return usageErrorf("spillctl simulate: unexpected argument %q: arrivals are read from stdin (see spillctl simulate --help)", fs.Arg(0))
	}
	limit, err := spec.Build()
	if err != nil {
		var le *bucket.LimitError
		if errors.As(err, &le) {
			if le.Value != "" {
				return fmt.Errorf("spillctl simulate: --%s %s: %s", le.Field, le.Value, le.Reason)
			}
			return fmt.Errorf("spillctl simulate: --%s: %s", le.Field, le.Reason)
		}
		return fmt.Errorf("spillctl simulate: %w", err)
	}

	var now atomic.Int64
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	sim := &simulate.Simulator{Limit: limit, SetClock: func(t time.Time) { now.Store(t.UnixNano()) }, Summary: *summary}
	switch *store {
	case "memory":
		m, err := bucket.NewMemory(bucket.WithClock(clock))
		if err != nil {
			return err
		}
		sim.Store = m
	case "redis":
		url := *redisURL
		if url == "" {
			url = getenv("SPILLWAY_REDIS_URL")
		}
		if url == "" {
			url = "redis://127.0.0.1:6379/0"
		}
		s, cleanup, err := redisStore(ctx, url, clock)
		if err != nil {
			return err
		}
		defer cleanup()
		sim.Store = s
	default:
		return fmt.Errorf("spillctl simulate: --store %q: want memory or redis", *store)
	}
	return sim.Run(ctx, stdin, stdout)
}

// redisStore connects to url and returns a store whose keys live under a
// fresh random prefix, and a cleanup that deletes them.
func redisStore(ctx context.Context, url string, clock func() time.Time) (bucket.Store, func(), error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("spillctl simulate: --redis %q: %w", url, err)
	}
	client := redis.NewClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("spillctl simulate: cannot reach Redis at %s: %w (is redis-server running? set --redis)", opts.Addr, err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	prefix := "spillway:simulate:" + hex.EncodeToString(id[:]) + ":"
	s, err := redisbucket.New(client, redisbucket.WithClock(clock), redisbucket.WithPrefix(prefix))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := client.Scan(cctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(cctx) {
			client.Del(cctx, iter.Val())
		}
		client.Close()
	}
	return s, cleanup, nil
}
