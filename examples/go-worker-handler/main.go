// Command go-worker-handler is the downstream end of a Spillway queue: the
// service that Spillway's worker hands each job to. It serves both handler
// contracts (docs/design.md#handlers), each optional:
//
//   - HTTP (-listen): the worker POSTs the payload to /jobs. 2xx is done;
//     429 or 503 with Retry-After is pushback (the job comes back no sooner,
//     and the queue's leak pauses); another 4xx fails the job for good (it
//     goes to the dead-letter stream); 5xx is retried on the backoff schedule.
//   - NATS (-nats, -subject): the worker sends a request; the reply's
//     Spillway-Status header says ok, busy (pushback, with Retry-After),
//     retry or permanent, and Spillway-Error why.
//
// It takes at most -capacity jobs at once and pushes back on the rest, so a
// burst slows the queue's drain instead of overloading this service. A job
// is delivered at least once, so it remembers the Idempotency-Key of the
// jobs it finished and does not do one twice.
//
// The queue's handler setting points at it:
//
//	handler: {http: {url: "http://127.0.0.1:9000/jobs"}}
//	handler: {nats: {subject: "jobs.email"}}
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-worker-handler:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("go-worker-handler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9000", `HTTP address to serve POST /jobs on ("" for none)`)
	natsURL := fs.String("nats", "", `NATS server to answer job requests from ("" for none)`)
	subject := fs.String("subject", "jobs.example", "subject of the job requests (the queue's handler.nats.subject)")
	capacity := fs.Int("capacity", 4, "jobs worked on at once; more are pushed back")
	work := fs.Duration("work", 0, "how long one job takes (a stand-in for real work)")
	retryAfter := fs.Int("retry-after", 1, "seconds a pushed-back job waits (Retry-After)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" && *natsURL == "" {
		return errors.New("nothing to serve: give -listen, -nats or both")
	}
	if *capacity < 1 || *retryAfter < 1 {
		return errors.New("-capacity and -retry-after must be at least 1")
	}
	s := &service{slots: make(chan struct{}, *capacity), work: *work, retryAfter: *retryAfter, done: map[string]bool{}, out: stdout}

	if *natsURL != "" {
		nc, err := nats.Connect(*natsURL, nats.Name("go-worker-handler"))
		if err != nil {
			return err
		}
		defer nc.Close()
		// A queue group: run several copies of this service and each
		// job goes to one of them.
		sub, err := nc.QueueSubscribe(*subject, "go-worker-handler", s.serveNATS)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Drain() }()
		if err := nc.Flush(); err != nil {
			return err
		}
		s.printf("go-worker-handler: nats %s on %s\n", *subject, nc.ConnectedUrlRedacted())
	}
	if *listen == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /jobs", s.serveHTTP)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.printf("go-worker-handler: http://%s/jobs\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// service is the business end: what a job does, and how busy it may get.
type service struct {
	slots      chan struct{} // one per job worked on now
	work       time.Duration
	retryAfter int
	out        io.Writer

	mu   sync.Mutex
	done map[string]bool // Idempotency-Key of the jobs finished (keep them in a database, with a TTL, in a real service)
}

// job is what Spillway's worker sends with each payload.
type job struct {
	id, queue, key, idem string
	attempt              int
	payload              []byte
}

// verdict is how a job went, in terms both contracts can say.
type verdict int

const (
	ok        verdict = iota // done (or done before)
	busy                     // over capacity: pushback
	permanent                // never going to work: dead-letter it
)

// handle does one job. The payload "poison" stands for a job this service
// can never do.
func (s *service) handle(j job) (verdict, string) {
	if j.idem != "" && s.finished(j.idem) {
		s.printf("duplicate job=%s attempt=%d: done before, not again\n", j.id, j.attempt)
		return ok, ""
	}
	if string(j.payload) == "poison" {
		s.printf("permanent job=%s attempt=%d\n", j.id, j.attempt)
		return permanent, "this service cannot do a poison job"
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.printf("busy job=%s attempt=%d: pushing back for %ds\n", j.id, j.attempt, s.retryAfter)
		return busy, "at capacity"
	}
	defer func() { <-s.slots }()
	time.Sleep(s.work) // the real work goes here
	s.mu.Lock()
	s.done[j.idem] = true
	s.mu.Unlock()
	s.printf("done job=%s queue=%s attempt=%d key=%s payload=%q\n", j.id, j.queue, j.attempt, j.key, j.payload)
	return ok, ""
}

func (s *service) finished(idem string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[idem]
}

func (s *service) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format, args...)
}

func (s *service) serveHTTP(w http.ResponseWriter, r *http.Request) {
	payload, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the payload: "+err.Error(), http.StatusInternalServerError) // 5xx: retried
		return
	}
	v, why := s.handle(jobOf(r.Header.Get, payload))
	switch v {
	case ok:
		w.WriteHeader(http.StatusNoContent)
	case busy:
		w.Header().Set(spillway.HeaderRetryAfter, strconv.Itoa(s.retryAfter))
		http.Error(w, why, http.StatusTooManyRequests) // or 503
	case permanent:
		http.Error(w, why, http.StatusUnprocessableEntity) // any 4xx but 429
	}
}

func (s *service) serveNATS(m *nats.Msg) {
	get := func(k string) string { return m.Header.Get(k) }
	v, why := s.handle(jobOf(get, m.Data))
	reply := nats.NewMsg(m.Reply)
	switch v {
	case ok:
		reply.Header.Set(spillway.HeaderStatus, spillway.HandlerOK)
	case busy:
		reply.Header.Set(spillway.HeaderStatus, spillway.HandlerBusy)
		reply.Header.Set(spillway.HeaderRetryAfter, strconv.Itoa(s.retryAfter))
		reply.Header.Set(spillway.HeaderError, why)
	case permanent:
		reply.Header.Set(spillway.HeaderStatus, spillway.HandlerPermanent)
		reply.Header.Set(spillway.HeaderError, why)
	}
	if err := m.RespondMsg(reply); err != nil {
		s.printf("replying to job %s: %v\n", get(spillway.HeaderJobID), err)
	}
}

// jobOf reads the headers Spillway's worker sends (docs/design.md#handlers),
// named in package spillway, which imports nothing but the standard
// library.
func jobOf(get func(string) string, payload []byte) job {
	attempt, _ := strconv.Atoi(get(spillway.HeaderAttempt))
	key := get(spillway.HeaderKey)
	if get(spillway.HeaderKeyEncoding) == "percent" { // a key that is no valid header value
		if k, err := url.PathUnescape(key); err == nil {
			key = k
		}
	}
	return job{
		id: get(spillway.HeaderJobID), queue: get(spillway.HeaderQueue), key: key,
		idem: get(spillway.HeaderIdempotencyKey), attempt: attempt, payload: payload,
	}
}
