package door

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A job's record is read on both doors alike: GET /v1/jobs/{id}, and a
// request on spillway.job.<id> (NATSJobs), which answers with the same
// JSON, or with the same problem document.

// jobOf is the wire form of a status record. A record holds the same
// fields as spillway.Job, so it converts as it is; the day the stored
// record gains a field the wire does not show, this stops compiling and
// has to say which fields it sends.
func jobOf(r jobstatus.Record) spillway.Job { return spillway.Job(r) }

// locate is where the doors read a job's status: its record in st, or,
// for an admitted job, which has none until its outcome, its READY message
// in the admitter's queues as they are now (jobstatus.Locator).
func locate(st *jobstatus.Store, js jetstream.JetStream, a *admit.Admitter) *jobstatus.Locator {
	return jobstatus.NewLocator(st, js, func() []string {
		if a == nil {
			return nil
		}
		qs := a.Config().Queues
		names := make([]string, len(qs))
		for i := range qs {
			names[i] = qs[i].Name
		}
		return names
	})
}

// readJob reads job id's status from st (nil: the admitter keeps none)
// for who: another caller's job is not found. A failure is a problem with
// its HTTP status; logged is set when it is the server's (a read that
// failed), worth a warning.
func readJob(ctx context.Context, loc *jobstatus.Locator, st *jobstatus.Store, id string, who caller) (job spillway.Job, p *spillway.Problem, logged error) {
	if st == nil {
		return spillway.Job{}, &spillway.Problem{Type: spillway.ProblemNotFound, Status: http.StatusNotFound, Title: "Job status is not kept", ID: id,
			Detail: "this admitter keeps no job status records"}, nil
	}
	rec, err := loc.Get(ctx, id)
	switch {
	case errors.Is(err, jobstatus.ErrNotFound), err == nil && !who.owns(rec):
		return spillway.Job{}, notYours(id), nil
	case errors.Is(err, jobstatus.ErrInvalidID):
		return spillway.Job{}, &spillway.Problem{Type: spillway.ProblemBadRequest, Status: http.StatusBadRequest, Title: "Bad job id", Detail: err.Error()}, nil
	case err != nil:
		return spillway.Job{}, &spillway.Problem{Type: spillway.ProblemUnavailable, Status: http.StatusServiceUnavailable, Title: "Unavailable",
			ID: id, RetryAfterMS: 1000, Detail: "reading job status: " + err.Error()}, err
	}
	return jobOf(rec), nil, nil
}

// job is GET /v1/jobs/{id}.
func (h *httpDoor) job(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PathValue("id")
	job, p, logged := readJob(r.Context(), locate(h.o.Status, h.o.JS, h.o.Admitter), h.o.Status, id, who)
	if p == nil {
		writeJSON(w, http.StatusOK, "application/json", job)
		return
	}
	if logged != nil {
		h.o.Logger.Warn("door: reading job status", "job", id, "err", logged)
	}
	if p.Status == http.StatusServiceUnavailable {
		w.Header().Set(spillway.HeaderRetryAfter, "1")
	}
	problem(w, r, p.Status, *p)
}

// answerJob answers a request on spillway.job.<id> with the job's record
// (Content-Type application/json, Spillway-Status its state) or a problem
// (Content-Type application/problem+json, Spillway-Status error).
func (d *NATSJobs) answerJob(m *nats.Msg) {
	if !d.Access.answers(m) {
		return
	}
	id := strings.TrimPrefix(m.Subject, spillway.JobPrefix)
	who, ok := d.Access.caller(m)
	if !ok {
		p := &spillway.Problem{Type: spillway.ProblemUnauthorized, Status: http.StatusUnauthorized, Title: "Unauthorized", Detail: unauthorizedDetail, Instance: m.Subject}
		replyJSON(d.nc, d.logger, m, p, spillway.Failed, nats.Header{spillway.HeaderContentType: {spillway.ProblemContentType}}, "job", id)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	job, p, logged := readJob(ctx, locate(d.status, d.js, d.admitter), d.status, id, who)
	if p == nil {
		replyJSON(d.nc, d.logger, m, job, spillway.Status(job.State),
			nats.Header{spillway.HeaderContentType: {"application/json"}}, "job", id)
		return
	}
	if logged != nil {
		d.logger.Warn("door: reading job status", "job", id, "err", logged)
	}
	p.Instance = m.Subject
	replyJSON(d.nc, d.logger, m, p, spillway.Failed,
		nats.Header{spillway.HeaderContentType: {spillway.ProblemContentType}}, "job", id)
}
