// Command admissionfloor is the least any admitter with Spillway's
// architecture must do per submission, and nothing more: it answers NATS
// requests on spillway.submit.<queue> (so `spillctl bench --via nats` can
// load it) by deciding in Redis with redis_rate (the peer of docs/performance.md's
// throughput goal), storing the job in a JetStream stream with a
// synchronous publish (the answer must follow the PubAck), and replying
// "admitted". No job-status record, no config, no metrics, no tiers.
//
// With --subject-per-job it stores each job under a subject that ends with
// the job's id (stream FLOOR_BY_ID, subjects floor.byid.<id>), as the
// admitter stores a READY job so that the job is found by its id without
// an index: the floor of that part of the design, whose cost is
// nats-server's (a subject kept per stored message).
//
// scripts/bench-admission runs it after the admitter, on the same
// nats-server and redis-server, under the same loads: its figures are the
// floor this machine sets for the admitter's (docs/performance.md).
//
//	go run ./bench/admissionfloor --nats nats://127.0.0.1:4222 --redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

func main() {
	fs := flag.NewFlagSet("admissionfloor", flag.ContinueOnError)
	natsURL := fs.String("nats", nats.DefaultURL, "the NATS server's `URL` (JetStream enabled)")
	redisURL := fs.String("redis", "redis://127.0.0.1:6379/0", "the Redis server's `URL`")
	queueName := fs.String("queue", "floor", "answer requests for this `QUEUE` (subject spillway.submit.QUEUE)")
	keyHeader := fs.String("key-header", "X-Api-Key", "the `NAME` of the header that carries the client key")
	perJob := fs.Bool("subject-per-job", false, "store each job under floor.byid.<id> (stream FLOOR_BY_ID) rather than floor.jobs (stream FLOOR)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: admissionfloor [flags]\n\nThe minimal admission pipeline (NATS request, redis_rate decision, synchronous\nJetStream publish, reply) for comparison with the admitter in scripts/bench-admission.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if err := run(*natsURL, *redisURL, *queueName, *keyHeader, *perJob); err != nil {
		fmt.Fprintln(os.Stderr, "admissionfloor:", err)
		os.Exit(1)
	}
}

func run(natsURL, redisURL, queueName, keyHeader string, perJob bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ropts, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	ropts.PoolSize = 1024 // a connection for every request in progress: no waiting for one
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", redisURL, err)
	}
	limiter := redis_rate.NewLimiter(rdb)
	limit := redis_rate.PerSecond(1_000_000)

	nc, err := nats.Connect(natsURL, nats.Name("admissionfloor"))
	if err != nil {
		return fmt.Errorf("nats %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, subjects, subject := "FLOOR", "floor.jobs", func(string) string { return "floor.jobs" }
	if perJob {
		stream, subjects, subject = "FLOOR_BY_ID", "floor.byid.*", func(id string) string { return "floor.byid." + id }
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       stream,
		Subjects:   []string{subjects},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}); err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}

	answer := func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		rep := spillway.SubmitReply{Queue: queueName}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := limiter.Allow(rctx, "floor:"+m.Header.Get(keyHeader), limit)
		switch {
		case err != nil:
			rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemUnavailable, err.Error()
		case res.Allowed == 0:
			rep.Status, rep.Type = spillway.Rejected, spillway.ProblemRateLimited
		default:
			id := uuid.Must(uuid.NewV7()).String()
			job := nats.NewMsg(subject(id))
			job.Header.Set(jetstream.MsgIDHeader, id)
			job.Data = m.Data
			if _, err := js.PublishMsg(rctx, job); err != nil {
				rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemUnavailable, err.Error()
				break
			}
			rep.Status, rep.ID = spillway.Admitted, id
			reply.Header.Set(spillway.HeaderStatus, string(spillway.Admitted))
		}
		reply.Data, _ = json.Marshal(rep)
		_ = m.RespondMsg(reply)
	}
	sub, err := nc.QueueSubscribe(spillway.SubmitPrefix+queueName, "admissionfloor", func(m *nats.Msg) {
		if m.Reply != "" {
			go answer(m)
		}
	})
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(1<<20, 1<<30); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	fmt.Printf("admissionfloor ready: spillway.submit.%s\n", queueName)
	<-ctx.Done()
	return sub.Drain()
}
