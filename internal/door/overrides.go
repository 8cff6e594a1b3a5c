package door

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// What the limits (limits.go) and concurrency (concurrency.go) endpoints
// share: the queue they name, and the runtime overrides' bucket they
// write (docs/design.md#per-key-overrides).

// queueOf resolves {queue}, answering 404 when it is unknown.
func (h *httpDoor) queueOf(w http.ResponseWriter, r *http.Request) (*config.Queue, bool) {
	name := r.PathValue("queue")
	q := h.cfg().Queue(name)
	if q == nil {
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "Unknown queue",
			Detail: fmt.Sprintf("no queue %.80q; GET /v1/queues lists them", name)})
		return nil, false
	}
	return q, true
}

// clientKeyOf is {key} as a client key, the one a GET asks about;
// answering 400 for one longer than any client key can be.
func clientKeyOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.PathValue("key")
	if len(key) > admit.MaxKeyLen {
		badRequest(w, r, "key", fmt.Errorf("a key of %d bytes: want at most %d", len(key), admit.MaxKeyLen))
		return "", false
	}
	return key, true
}

// patternOf is {key} as a pattern, the one a PUT or DELETE is about;
// answering 400 for one that is not.
func patternOf(w http.ResponseWriter, r *http.Request) (overrides.Pattern, bool) {
	p, err := overrides.ParsePattern(r.PathValue("key"))
	if err != nil {
		badRequest(w, r, "key", err)
		return overrides.Pattern{}, false
	}
	return p, true
}

// overrideBody reads a PUT's body, at most 64 KiB (or
// http.max_body_bytes if less).
func (h *httpDoor) overrideBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	return readBody(w, r, min(h.cfg().HTTP.MaxBodyBytes, 64<<10), tooLarge)
}

// badRequest answers 400, naming field (if any) and saying err.
func badRequest(w http.ResponseWriter, r *http.Request, field string, err error) {
	problem(w, r, http.StatusBadRequest, spillway.Problem{Type: spillway.ProblemBadRequest, Title: "Bad request", Field: field, Detail: err.Error()})
}

// storeOverride stores rec in the runtime overrides' bucket, where every
// admitter follows it; false once it has answered 503.
func (h *httpDoor) storeOverride(w http.ResponseWriter, r *http.Request, rec overrides.Record) bool {
	if h.o.Limits == nil {
		h.unavailable(w, r, "setting an override", errors.New("this admitter has no overrides bucket"))
		return false
	}
	if err := overrides.Put(r.Context(), h.o.Limits, rec); err != nil {
		h.unavailable(w, r, "storing an override of "+rec.String(), err)
		return false
	}
	return true
}

// removeOverride removes the runtime override of pattern p of t; false
// once it has answered: 404 when there is none (saying that file, the
// configuration's override of the same pattern if any, stays), 503 when
// the bucket cannot be read or written.
func (h *httpDoor) removeOverride(w http.ResponseWriter, r *http.Request, t overrides.Target, p overrides.Pattern, file *overrides.Override) bool {
	if h.o.Limits == nil {
		h.unavailable(w, r, "removing an override", errors.New("this admitter has no overrides bucket"))
		return false
	}
	_, found, err := overrides.Get(r.Context(), h.o.Limits, t, p)
	if err != nil {
		h.unavailable(w, r, "reading an override of "+t.String(), err)
		return false
	}
	if !found {
		what := "tier " + t.Tier
		if t.Concurrency != "" {
			what = "concurrency entry " + t.Concurrency
		}
		detail := fmt.Sprintf("%s of queue %s has no runtime override of %.80q", what, t.Queue, p.String())
		if file != nil && file.Source == overrides.SourceConfig {
			detail += fmt.Sprintf("; its override at line %d of the configuration file stays until the file changes", file.Line)
		}
		problem(w, r, http.StatusNotFound, spillway.Problem{Type: spillway.ProblemNotFound, Title: "No such override", Detail: detail})
		return false
	}
	if err := overrides.Delete(r.Context(), h.o.Limits, t, p); err != nil {
		h.unavailable(w, r, "removing an override of "+t.String(), err)
		return false
	}
	return true
}
