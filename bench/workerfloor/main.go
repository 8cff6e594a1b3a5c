// Command workerfloor is the least any worker with Spillway's design must
// do per job, and nothing more. For each job in a queue's READY stream
// (SPILLWAY_<queue>_READY, pulled through the workers' own durable
// consumer spillway-ready, created or updated with the real worker's
// settings) it:
//
//  1. pulls it, never more jobs than it has free slots (one Fetch of as
//     many jobs as slots are free, waiting at most --fetch-wait), as the
//     real worker does, so no job waits in this process while a handler
//     elsewhere is idle;
//  2. POSTs its payload to --url with the headers the real http handler
//     sends (Spillway-Job-Id, -Queue, -Key, -Attempt, Idempotency-Key,
//     Content-Type), on keep-alive connections, one per slot;
//  3. stores the outcome as one job-status record, the record the real
//     worker writes after a first try that succeeded (internal/jobstatus:
//     state succeeded, key = job id, bucket spillway-jobs-NN by the id):
//     one KV put, waiting for its acknowledgement;
//  4. acks it with a double ack (AckSync: the ack waits for JetStream's
//     confirmation).
//
// A handler that fails or answers other than 2xx, or an ack that fails,
// has its job nak'd (given back at once), and ends the run with an error:
// a floor with failures measures nothing. Nothing else: no retry policy, no
// dead letters, no heartbeats, no pause, no backlog drain, no metrics, no
// events, no config. Slots run as that many goroutines.
//
// It stops when --count jobs are done, or when a pull brings nothing while
// no job is running (READY is empty), and prints the jobs done, the seconds
// from its first pull to its last ack, jobs a second and its own CPU
// seconds (user + system, start-up included).
//
// scripts/bench-worker runs it after the worker, on the same nats-server
// and handler, over the same number of jobs the admitter put in READY
// (spillctl bench): its figures are the floor this machine sets for the
// worker's (docs/performance.md).
//
//	go run ./bench/workerfloor --nats nats://127.0.0.1:4222 --queue bench --url http://127.0.0.1:9000/job
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "workerfloor:", err)
		os.Exit(1)
	}
}

// errUsage is a flag error, already reported with the usage.
var errUsage = errors.New("usage")

// options are the command's flags.
type options struct {
	natsURL   string
	queue     string
	url       string
	slots     int
	count     int
	fetchWait time.Duration
	timeout   time.Duration
	jsonOut   bool
}

// result is what a run prints.
type result struct {
	Jobs       int64   `json:"jobs"`
	Failed     int64   `json:"failed"`      // nak'd: the handler failed, or the ack did
	StatusLost int64   `json:"status_lost"` // acked, but its status record's put failed
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_second"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("workerfloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.natsURL, "nats", nats.DefaultURL, "the NATS server's `URL` (JetStream enabled)")
	fs.StringVar(&o.queue, "queue", "bench", "run the jobs of this `QUEUE` (stream SPILLWAY_QUEUE_READY)")
	fs.StringVar(&o.url, "url", "", "the handler's `URL`: each job is POSTed there (required)")
	fs.IntVar(&o.slots, "slots", 64, "`N` jobs at once (the worker's concurrency)")
	fs.IntVar(&o.count, "count", 0, "stop after `N` jobs (0: when READY is empty)")
	fs.DurationVar(&o.fetchWait, "fetch-wait", worker.DefaultFetchWait, "how long one pull waits for jobs (`D`); a pull that brings none while nothing runs ends the run")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "the handler's time to answer (`D`)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: workerfloor --url URL [flags]\n\nThe minimal worker (pull from READY, POST to the handler, one job-status put,\ndouble ack) for comparison with the worker in scripts/bench-worker.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.url == "":
		return errors.New("--url: the handler's URL is required")
	case o.slots < 1:
		return fmt.Errorf("--slots %d: must be ≥ 1", o.slots)
	case o.count < 0:
		return fmt.Errorf("--count %d: must be ≥ 0", o.count)
	case o.fetchWait < 10*time.Millisecond:
		return fmt.Errorf("--fetch-wait %v: must be at least 10ms", o.fetchWait)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	if err := spillway.ValidateQueueName(o.queue); err != nil {
		return fmt.Errorf("--queue: %w", err)
	}
	res, err := work(ctx, o)
	if err != nil {
		return err
	}
	if o.jsonOut {
		b, _ := json.Marshal(res)
		_, err = fmt.Fprintf(stdout, "%s\n", b)
	} else {
		_, err = fmt.Fprintf(stdout, "jobs %d  failed %d  status lost %d  seconds %.3f  jobs/s %.0f  cpu seconds %.2f\n",
			res.Jobs, res.Failed, res.StatusLost, res.Seconds, res.JobsPerSec, res.CPUSeconds)
	}
	switch {
	case err != nil:
		return err
	case res.Failed > 0:
		return fmt.Errorf("%d jobs failed; the first: %s", res.Failed, res.FirstError)
	case res.StatusLost > 0:
		return fmt.Errorf("%d status records were not written; the first: %s", res.StatusLost, res.FirstError)
	}
	return nil
}

// floor is one run's connections and counts.
type floor struct {
	o      options
	cons   jetstream.Consumer
	kv     [queue.KVShards]jetstream.KeyValue
	client *http.Client

	free    chan struct{} // a token per idle slot
	jobs    chan jetstream.Msg
	done    atomic.Int64
	failed  atomic.Int64
	lost    atomic.Int64
	lastAck atomic.Int64  // unix nanoseconds of the latest ack
	enough  chan struct{} // closed when --count jobs are done
	once    sync.Once
	errMu   sync.Mutex
	firstEr error
}

func work(ctx context.Context, o options) (result, error) {
	nc, err := nats.Connect(o.natsURL, nats.Name("workerfloor"))
	if err != nil {
		return result{}, fmt.Errorf("nats %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return result{}, err
	}
	f := &floor{
		o:      o,
		free:   make(chan struct{}, o.slots),
		jobs:   make(chan jetstream.Msg, o.slots),
		enough: make(chan struct{}),
	}
	// The real worker's ready consumer (worker.readyConsumer): a work-queue
	// stream takes one unfiltered consumer, so the floor uses that one.
	stream := queue.StreamName(o.queue, queue.Ready)
	if f.cons, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       worker.ReadyConsumer,
		Description:   "Spillway workers: admitted jobs and retries",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       worker.DefaultAckWait,
		MaxDeliver:    -1,
		MaxAckPending: max(1000, 64*o.slots),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		return result{}, fmt.Errorf("consumer %s on %s: %w", worker.ReadyConsumer, stream, err)
	}
	for i := range f.kv {
		name := queue.ShardBucket(jobstatus.Bucket, i)
		if f.kv[i], err = js.KeyValue(ctx, name); err != nil {
			return result{}, fmt.Errorf("job status bucket %s (an admitter creates it): %w", name, err)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = o.slots // a kept-alive connection per slot
	tr.MaxIdleConns = o.slots
	f.client = &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	var wg sync.WaitGroup
	for range o.slots {
		f.free <- struct{}{}
		wg.Go(func() {
			for msg := range f.jobs {
				f.handle(ctx, msg)
				f.free <- struct{}{}
			}
		})
	}
	start := time.Now()
	err = f.pull(ctx)
	close(f.jobs)
	wg.Wait()
	if err != nil {
		return result{}, err
	}
	res := result{Jobs: f.done.Load(), Failed: f.failed.Load(), StatusLost: f.lost.Load()}
	f.errMu.Lock()
	if f.firstEr != nil {
		res.FirstError = f.firstEr.Error()
	}
	f.errMu.Unlock()
	if last := f.lastAck.Load(); last > 0 {
		res.Seconds = time.Unix(0, last).Sub(start).Seconds()
		res.JobsPerSec = float64(res.Jobs) / res.Seconds
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		res.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return res, nil
}

// pull fetches as many jobs as there are free slots, until --count jobs
// are done, READY is empty or ctx ends. With --count it asks for no more
// jobs than are left to do, so that its last pull does not wait for jobs
// it would not run.
func (f *floor) pull(ctx context.Context) error {
	delivered := 0
	for {
		if f.o.count > 0 && delivered >= f.o.count {
			select { // every job asked for is delivered: wait for them to be done
			case <-f.enough:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Wait for one free slot, then take every free one.
		select {
		case <-f.free:
		case <-f.enough:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		n := 1
	more:
		for n < f.o.slots {
			select {
			case <-f.free:
				n++
			default:
				break more
			}
		}
		if left := f.o.count - delivered; f.o.count > 0 && n > left {
			for range n - left {
				f.free <- struct{}{}
			}
			n = left
		}
		batch, err := f.cons.Fetch(n, jetstream.FetchMaxWait(f.o.fetchWait))
		if err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			f.jobs <- msg
		}
		delivered += got
		for range n - got {
			f.free <- struct{}{}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("pull: %w", err)
		}
		if got == 0 && len(f.free) == f.o.slots {
			return nil // nothing came and nothing runs: READY is empty
		}
	}
}

// handle runs one job: the handler, the status record, the double ack.
func (f *floor) handle(ctx context.Context, msg jetstream.Msg) {
	h := msg.Headers()
	id := h.Get(spillway.HeaderJobID)
	attempt, _ := strconv.Atoi(h.Get(spillway.HeaderAttempt))
	if meta, err := msg.Metadata(); err == nil {
		attempt += int(meta.NumDelivered)
	}
	began := time.Now()
	if err := f.post(ctx, msg, id, attempt); err != nil {
		f.fail(fmt.Errorf("job %s: %w", id, err))
		_ = msg.Nak()
		return
	}
	now := time.Now()
	enqueued, _ := time.Parse(time.RFC3339Nano, h.Get(queue.HeaderEnqueuedAt))
	rec, _ := json.Marshal(jobstatus.Record{
		ID: id, Queue: h.Get(spillway.HeaderQueue), State: spillway.StateSucceeded, Attempts: attempt,
		EnqueuedAt: enqueued, StartedAt: began.UTC().Round(0), FinishedAt: now.UTC().Round(0), UpdatedAt: now.UTC().Round(0),
	})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := f.kv[queue.ShardOf(id)].Put(sctx, id, rec); err != nil {
		// Advisory, as the worker's: the job is acked all the same.
		f.lost.Add(1)
		f.firstError(fmt.Errorf("job %s: status record: %w", id, err))
	}
	if err := msg.DoubleAck(sctx); err != nil {
		f.fail(fmt.Errorf("job %s: ack: %w", id, err))
		_ = msg.Nak()
		return
	}
	f.lastAck.Store(time.Now().UnixNano())
	if n := f.done.Add(1); f.o.count > 0 && n >= int64(f.o.count) {
		f.stop()
	}
}

// post sends the job to the handler as the worker's http handler does.
func (f *floor) post(ctx context.Context, msg jetstream.Msg, id string, attempt int) error {
	rctx, cancel := context.WithTimeout(ctx, f.o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, f.o.url, bytes.NewReader(msg.Data()))
	if err != nil {
		return err
	}
	h := msg.Headers()
	req.Header.Set(spillway.HeaderJobID, id)
	req.Header.Set(spillway.HeaderQueue, h.Get(spillway.HeaderQueue))
	req.Header.Set(spillway.HeaderKey, h.Get(spillway.HeaderKey))
	req.Header.Set(spillway.HeaderAttempt, strconv.Itoa(attempt))
	req.Header.Set(spillway.HeaderIdempotencyKey, id)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s", f.o.url, resp.Status)
	}
	return nil
}

// fail counts a failed job, keeps the first error for the report and
// ends the run: a floor with failures measures nothing, and a job nak'd
// for good would come back for ever.
func (f *floor) fail(err error) {
	f.failed.Add(1)
	f.firstError(err)
	f.stop()
}

func (f *floor) stop() { f.once.Do(func() { close(f.enough) }) }

func (f *floor) firstError(err error) {
	f.errMu.Lock()
	if f.firstEr == nil {
		f.firstEr = err
	}
	f.errMu.Unlock()
}
