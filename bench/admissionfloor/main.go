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
// With --http ADDR it answers the same submissions over HTTP/1.1 too, as
// the admitter's HTTP door is asked (POST /v1/queues/<queue>/jobs, the
// payload as the body, the key in its header): net/http's server reads
// the body, the same decision, publish and answer (202 with the submit
// reply in JSON). No authentication, rate-limit headers, in-flight bound
// or write deadline: the floor of the HTTP door, so that HTTP ÷ NATS can
// be read for the floor, what the protocol costs on this machine, beside
// the admitter's.
//
// scripts/bench-admission runs it after the admitter, on the same
// nats-server and redis-server, under the same loads: its figures are the
// floor this machine sets for the admitter's (docs/performance.md).
//
//	go run ./bench/admissionfloor --nats nats://127.0.0.1:4222 --redis redis://127.0.0.1:6379/0 [--http 127.0.0.1:8090]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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
	httpAddr := fs.String("http", "", "also answer submissions over HTTP on `ADDR` (host:port): POST /v1/queues/QUEUE/jobs")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: admissionfloor [flags]\n\nThe minimal admission pipeline (NATS request, redis_rate decision, synchronous\nJetStream publish, reply; with --http over HTTP too) for comparison with the\nadmitter in scripts/bench-admission.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, *natsURL, *redisURL, *queueName, *keyHeader, *httpAddr, *perJob)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "admissionfloor:", err)
		os.Exit(1)
	}
}

// run answers submissions until ctx ends, after printing its ready line
// to out.
func run(ctx context.Context, out io.Writer, natsURL, redisURL, queueName, keyHeader, httpAddr string, perJob bool) error {
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

	// admit decides a submission of key, stores it and says what to answer.
	admit := func(ctx context.Context, key string, payload []byte) spillway.SubmitReply {
		rep := spillway.SubmitReply{Queue: queueName}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := limiter.Allow(ctx, "floor:"+key, limit)
		switch {
		case err != nil:
			rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemUnavailable, err.Error()
		case res.Allowed == 0:
			rep.Status, rep.Type = spillway.Rejected, spillway.ProblemRateLimited
		default:
			id := uuid.Must(uuid.NewV7()).String()
			job := nats.NewMsg(subject(id))
			job.Header.Set(jetstream.MsgIDHeader, id)
			job.Data = payload
			if _, err := js.PublishMsg(ctx, job); err != nil {
				rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemUnavailable, err.Error()
				break
			}
			rep.Status, rep.ID = spillway.Admitted, id
		}
		return rep
	}
	answer := func(m *nats.Msg) {
		rep := admit(ctx, m.Header.Get(keyHeader), m.Data)
		reply := nats.NewMsg(m.Reply)
		if rep.Status == spillway.Admitted {
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
	where := "spillway.submit." + queueName
	if httpAddr != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", httpAddr, err)
		}
		srv := &http.Server{Handler: httpHandler(queueName, keyHeader, admit), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		where += " and http://" + ln.Addr().String() + "/v1/queues/" + queueName + "/jobs"
	}
	fmt.Fprintf(out, "admissionfloor ready: %s\n", where)
	<-ctx.Done()
	return sub.Drain()
}

// maxBody is the largest submission the HTTP side reads (the admitter's
// default http.max_body_bytes).
const maxBody = 1 << 20

// httpHandler answers POST /v1/queues/<queue>/jobs as the admitter's HTTP
// door does for an admitted job (202, the submit reply in JSON, its
// verdict in Spillway-Status), 429 for a rejected one and 503 for a
// failure, with admit's decision.
func httpHandler(queueName, keyHeader string, admit func(context.Context, string, []byte) spillway.SubmitReply) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/queues/"+queueName+"/jobs", func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		var body []byte
		var err error
		if r.ContentLength >= 0 {
			body = make([]byte, r.ContentLength)
			_, err = io.ReadFull(r.Body, body)
		} else {
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rep := admit(r.Context(), r.Header.Get(keyHeader), body)
		status := http.StatusAccepted
		switch rep.Status {
		case spillway.Rejected:
			status = http.StatusTooManyRequests
		case spillway.Failed:
			status = http.StatusServiceUnavailable
		}
		out, _ := json.Marshal(rep)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(spillway.HeaderStatus, string(rep.Status))
		w.WriteHeader(status)
		_, _ = w.Write(out)
	})
	return mux
}
