package door

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A cancel (docs/design.md#cancel) takes a queued job out of the backlog:
// its status record goes from queued to cancelled, under the same
// revision check a worker's start passes (jobstatus.Store.Cancel and
// StartGate), then its backlog message is deleted (admin.CancelBacklogJob),
// which frees its place and its key's at once. Both doors answer the same:
// DELETE /v1/jobs/{id} and a request on spillway.cancel.<queue>.

// cancelFailure is why a cancel did not cancel: an HTTP status with a
// problem document, or on NATS a CancelReply with Type and Error.
type cancelFailure struct {
	status int
	p      spillway.Problem
	// logged: a server-side failure, worth a warning.
	logged error
}

// cancelJob cancels job id for who, of queue name if name is not empty
// (the NATS subject's queue: a job of another queue is unknown there, as
// another caller's job is).
func cancelJob(ctx context.Context, js jetstream.JetStream, a *admit.Admitter, st *jobstatus.Store, name, id string, who caller, log *slog.Logger) (jobstatus.Record, *cancelFailure) {
	notFound := &cancelFailure{status: http.StatusNotFound, p: spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown job", ID: id,
		Detail: "no status for this job id (unknown, or older than status.ttl)"}}
	if st == nil {
		return jobstatus.Record{}, &cancelFailure{status: http.StatusNotFound, p: spillway.Problem{Type: spillway.ProblemNotFound, Title: "Job status is not kept", ID: id,
			Detail: "a cancel needs the job status records; this admitter keeps none"}}
	}
	// An admitted job, found in READY when it has no record yet, is not
	// cancellable: the same answer as for its admitted record.
	rec, err := locate(st, js, a).CancelAs(ctx, id, who.id, func(rec jobstatus.Record) bool {
		return who.owns(rec) && (name == "" || rec.Queue == name)
	})
	var nc *jobstatus.NotCancellableError
	switch {
	case errors.Is(err, jobstatus.ErrInvalidID):
		return jobstatus.Record{}, &cancelFailure{status: http.StatusBadRequest, p: spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad job id", Detail: err.Error()}}
	case errors.Is(err, jobstatus.ErrNotFound):
		return jobstatus.Record{}, notFound
	case errors.As(err, &nc):
		cur := nc.Record
		if cur.State == spillway.StateCancelled && cur.BacklogSeq != 0 {
			// An earlier cancel may have failed to free the place: finish it.
			if err := admin.CancelBacklogJob(ctx, js, cur.Queue, cur.BacklogSeq, id); err != nil {
				log.Warn("door: removing a cancelled job from the backlog", "job", id, "err", err)
			}
		}
		detail := fmt.Sprintf("job %s is %s: only a queued job can be cancelled", id, cur.State)
		if cur.State == spillway.StateAdmitted {
			detail += " (an admitted job starts at once)"
		}
		return jobstatus.Record{}, &cancelFailure{status: http.StatusConflict, p: spillway.Problem{Type: spillway.ProblemConflict, Title: "Job not queued",
			Detail: detail, ID: id, Queue: cur.Queue, State: cur.State}}
	case err != nil:
		return jobstatus.Record{}, &cancelFailure{status: http.StatusServiceUnavailable, logged: err,
			p: spillway.Problem{Type: spillway.ProblemUnavailable, Title: "Unavailable", ID: id, RetryAfterMS: 1000, Detail: "cancelling the job: " + err.Error()}}
	}
	if rec.BacklogSeq == 0 {
		// The admitter's record did not say where the job is. It never
		// starts all the same (the worker granted it finds it cancelled and
		// removes it then); only its place is freed late.
		log.Warn("door: a cancelled job's backlog place is unknown; it is freed when the drain reaches it", "job", id)
		return rec, nil
	}
	if err := admin.CancelBacklogJob(ctx, js, rec.Queue, rec.BacklogSeq, id); err != nil {
		if errors.Is(err, admin.ErrNotThisJob) {
			log.Error("door: a cancelled job's record names another backlog message; it is freed when the drain reaches it", "job", id, "err", err)
			return rec, nil
		}
		return jobstatus.Record{}, &cancelFailure{status: http.StatusServiceUnavailable, logged: err,
			p: spillway.Problem{Type: spillway.ProblemUnavailable, Title: "Unavailable", ID: id, Queue: rec.Queue, RetryAfterMS: 1000,
				Detail: "the job is cancelled and will not run, but freeing its backlog place failed; cancel again to free it: " + err.Error()}}
	}
	return rec, nil
}

// cancel is DELETE /v1/jobs/{id}: 200 with the cancelled job's record.
func (h *httpDoor) cancel(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PathValue("id")
	rec, f := cancelJob(r.Context(), h.o.JS, h.o.Admitter, h.o.Status, "", id, who, h.o.Logger)
	if f != nil {
		if f.logged != nil {
			h.o.Logger.Warn("door: cancel", "job", id, "err", f.logged)
		}
		if f.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		problem(w, r, f.status, f.p)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", jobOf(rec))
}

// NATSJobs answers the NATS door's requests about jobs, in the admitters'
// queue group: reads on spillway.job.<id> (job.go) and cancels on
// spillway.cancel.<queue>. A cancel is answered with a
// spillway.CancelReply and its status in the Spillway-Status header, as
// the NATS door answers submissions.
type NATSJobs struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	admitter *admit.Admitter
	status   *jobstatus.Store
	logger   *slog.Logger
	subs     []*nats.Subscription
	sem      chan struct{}
	wg       sync.WaitGroup
	// Timeout bounds one read or cancel (default 10s).
	Timeout time.Duration
	// Access is whom the door answers, and where; set it before Start.
	Access NATSAccess
}

// maxConcurrentJobs bounds the reads and cancels NATSJobs works on at
// once: clients waiting for their jobs poll spillway.job.<id>, many at a
// time.
const maxConcurrentJobs = 256

// NewNATSJobs returns the job subjects' door over status (nil: every read
// and cancel answers not-found); Start subscribes.
func NewNATSJobs(nc *nats.Conn, js jetstream.JetStream, a *admit.Admitter, status *jobstatus.Store, logger *slog.Logger) *NATSJobs {
	if logger == nil {
		logger = slog.Default()
	}
	return &NATSJobs{nc: nc, js: js, admitter: a, status: status, logger: logger, sem: make(chan struct{}, maxConcurrentJobs), Timeout: 10 * time.Second}
}

// Start subscribes to spillway.job.* and spillway.cancel.* in the
// admitters' queue group.
func (d *NATSJobs) Start() error {
	for _, s := range []struct {
		prefix string
		answer func(*nats.Msg)
	}{{spillway.JobPrefix, d.answerJob}, {spillway.CancelPrefix, d.answer}} {
		sub, err := d.nc.QueueSubscribe(s.prefix+"*", AdmitterGroup, func(m *nats.Msg) {
			d.sem <- struct{}{}
			d.wg.Add(1)
			go func() {
				defer func() { <-d.sem; d.wg.Done() }()
				s.answer(m)
			}()
		})
		if err != nil {
			return err
		}
		d.subs = append(d.subs, sub)
	}
	return d.nc.Flush()
}

// Stop stops taking requests, answers those received, and waits for them
// or for ctx.
func (d *NATSJobs) Stop(ctx context.Context) error {
	var none sync.WaitGroup
	for _, sub := range d.subs {
		if err := drainAndWait(ctx, sub, &none); err != nil {
			return err
		}
	}
	return drainAndWait(ctx, nil, &d.wg)
}

func (d *NATSJobs) answer(m *nats.Msg) {
	if !d.Access.answers(m) {
		return
	}
	name := strings.TrimPrefix(m.Subject, spillway.CancelPrefix)
	rep := spillway.CancelReply{Queue: name}
	who, ok := d.Access.caller(m)
	if !ok {
		rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemUnauthorized, unauthorizedDetail
		d.reply(m, rep)
		return
	}
	if d.admitter.Config().Queue(name) == nil {
		rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemNotFound, fmt.Sprintf("no queue %.80q", name)
		d.reply(m, rep)
		return
	}
	id := headerGet(m.Header, spillway.HeaderJobID)
	if id == "" {
		id = strings.TrimSpace(string(m.Data))
	}
	rep.ID = id
	if id == "" {
		rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemBadRequest, "no job id: send it as the body or in the "+spillway.HeaderJobID+" header"
		d.reply(m, rep)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	_, f := cancelJob(ctx, d.js, d.admitter, d.status, name, id, who, d.logger)
	if f != nil {
		if f.logged != nil {
			d.logger.Warn("door: cancel", "queue", name, "job", id, "err", f.logged)
		}
		if f.status == http.StatusBadRequest {
			rep.ID = "" // not a job id: not echoed
		}
		rep.Status, rep.Type, rep.Error, rep.State = spillway.Failed, f.p.Type, f.p.Detail, f.p.State
		d.reply(m, rep)
		return
	}
	rep.Status, rep.State = spillway.Cancelled, spillway.StateCancelled
	d.reply(m, rep)
}

func (d *NATSJobs) reply(m *nats.Msg, rep spillway.CancelReply) {
	replyJSON(d.nc, d.logger, m, rep, rep.Status, nil, "queue", rep.Queue, "id", rep.ID, "status", rep.Status)
}
