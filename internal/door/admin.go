package door

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The admin endpoints (docs/design.md#pause) take an admin key, one of
// http.admin_keys_file's: a request without a key, or with one that is no
// key at all, is 401; with a submit key (http.api_keys_file's), 403
// forbidden; and without an admin keys file every request is 403, saying
// how to configure one.

// maxPauseReason bounds a pause's reason, in characters.
const maxPauseReason = 200

// admin authenticates an admin request and hands next the fingerprint of
// its key.
func (h *httpDoor) admin(next func(w http.ResponseWriter, r *http.Request, by string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.o.AdminKeys.empty() {
			forbidden(w, r, "the admin endpoints are off: set http.admin_keys_file to a file of admin keys (one per line, as http.api_keys_file)")
			return
		}
		key := requestKey(r)
		switch {
		case key == "":
			unauthorized(w, r)
		case h.o.AdminKeys.has(key):
			next(w, r, KeyFingerprint(key))
		case h.o.Keys.has(key):
			forbidden(w, r, "this key may submit and read, not administer: send a key of http.admin_keys_file")
		default:
			unauthorized(w, r)
		}
	}
}

func forbidden(w http.ResponseWriter, r *http.Request, detail string) {
	problem(w, r, http.StatusForbidden, spillway.Problem{Type: spillway.ProblemForbidden, Title: "Forbidden", Detail: detail})
}

// pause is POST /v1/queues/{queue}/pause, with an optional JSON body
// {"reason": "..."}: 200 with the queue's pause state.
func (h *httpDoor) pause(w http.ResponseWriter, r *http.Request, by string) {
	cfg, name := h.cfg(), r.PathValue("queue")
	if cfg.Queue(name) == nil {
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown queue",
			Detail: fmt.Sprintf("no queue %.80q; GET /v1/queues lists them", name)})
		return
	}
	body, ok := readBody(w, r, min(cfg.HTTP.MaxBodyBytes, 64<<10), tooLarge)
	if !ok {
		return
	}
	var req spillway.PauseRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request",
				Detail: "the body: want a JSON object such as {\"reason\": \"...\"}, or none: " + err.Error()})
			return
		}
	}
	if n := utf8.RuneCountInString(req.Reason); n > maxPauseReason {
		problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: "reason",
			Detail: fmt.Sprintf("a reason of %d characters: want at most %d", n, maxPauseReason)})
		return
	}
	h.setPause(w, r, name, pace.PauseState{Paused: true, At: time.Now().UTC(), By: by, Reason: req.Reason})
}

// resume is POST /v1/queues/{queue}/resume: 200 with the queue's pause
// state.
func (h *httpDoor) resume(w http.ResponseWriter, r *http.Request, by string) {
	name := r.PathValue("queue")
	if h.cfg().Queue(name) == nil {
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown queue",
			Detail: fmt.Sprintf("no queue %.80q; GET /v1/queues lists them", name)})
		return
	}
	h.setPause(w, r, name, pace.PauseState{At: time.Now().UTC(), By: by})
}

// setPause writes st, unless the queue is in that state already: pausing a
// paused queue keeps when and by whom it was paused.
func (h *httpDoor) setPause(w http.ResponseWriter, r *http.Request, name string, st pace.PauseState) {
	q := h.cfg().Queue(name)
	cur, err := pace.ReadPause(r.Context(), h.o.JS, name)
	if err != nil {
		h.unavailable(w, r, "reading the pause state of queue "+name, err)
		return
	}
	if cur.Paused == st.Paused && !cur.At.IsZero() {
		st = cur
	} else {
		if err := pace.SetPause(r.Context(), h.o.JS, name, q.Backlog.Replicas, st); err != nil {
			h.unavailable(w, r, "writing the pause state of queue "+name, err)
			return
		}
		if h.o.Inspector != nil {
			h.o.Inspector.Invalidate() // GET /v1/queues here shows it at once
		}
		if st.Paused {
			h.o.Logger.Warn("door: queue paused: its workers start none of its jobs until it is resumed", "queue", name, "by", st.By, "reason", st.Reason)
		} else {
			h.o.Logger.Info("door: queue resumed", "queue", name, "by", st.By)
		}
	}
	writeJSON(w, http.StatusOK, "application/json", spillway.PauseReply{Queue: name, Paused: st.Paused, At: st.At, By: st.By, Reason: st.Reason})
}
