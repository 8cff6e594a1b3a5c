package door

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// What the limits (limits.go) and concurrency (concurrencyoverrides.go)
// endpoints share: the queue they name, the runtime overrides' bucket
// they write (docs/design.md#per-key-overrides), and the endpoints of one
// key's override — GET, PUT and DELETE of .../keys/{key} — which are the
// same for a limit tier and a concurrency entry but for what their scope
// says.

// overrideScope is what a runtime override is of, resolved from a
// request's path: a queue's limit tier (tierScope) or one of its
// concurrency entries (concurrencyScope).
type overrideScope interface {
	// target is the scope's name in the overrides' bucket.
	target() overrides.Target
	// table is the scope's overrides in force, the file's and the
	// runtime's.
	table() *overrides.Table
	// keyed is an error naming its field when the scope has one key,
	// which its own limit bounds and no override applies to; nil when it
	// has keys.
	keyed() (field string, err error)
	// answer is what a GET or PUT answers about key: o's, or the scope's
	// own when o is nil.
	answer(key string, o *overrides.Override) any
	// override fills rec's value (Params, Max) from a PUT's body and
	// checks the override it makes; an error names the field it is about
	// ("" for none).
	override(body []byte, rec *overrides.Record) (_ overrides.Override, field string, _ error)
	// kind names the scope's overrides in log lines ("limit"), logArgs
	// the scope itself, and setting what o sets.
	kind() string
	logArgs() []any
	setting(o overrides.Override) (key string, value any)
}

// scopeOf resolves {queue} and the scope a request's path names,
// answering 404 when either is unknown.
type scopeOf func(w http.ResponseWriter, r *http.Request) (overrideScope, bool)

// keyOverride is GET .../keys/{key} of the scope of: the override the key
// gets, and where it comes from.
func keyOverride(of scopeOf) func(w http.ResponseWriter, r *http.Request, by string) {
	return func(w http.ResponseWriter, r *http.Request, _ string) {
		s, ok := of(w, r)
		if !ok {
			return
		}
		key, ok := clientKeyOf(w, r)
		if !ok {
			return
		}
		writeJSON(w, http.StatusOK, "application/json", s.answer(key, s.table().Match(key)))
	}
}

// setKeyOverride is PUT .../keys/{key} of the scope of, with the
// override's value as a JSON object: the override is stored in the
// runtime overrides' bucket, where every admitter follows it. 200 with
// the override.
func (h *httpDoor) setKeyOverride(of scopeOf) func(w http.ResponseWriter, r *http.Request, by string) {
	return func(w http.ResponseWriter, r *http.Request, by string) {
		s, p, ok := overridePatternOf(w, r, of)
		if !ok {
			return
		}
		body, ok := h.overrideBody(w, r)
		if !ok {
			return
		}
		rec := overrides.Record{Target: s.target(), Key: p.String(), By: by, At: time.Now().UTC()}
		o, field, err := s.override(body, &rec)
		if err != nil {
			badRequest(w, r, field, err)
			return
		}
		if !h.storeOverride(w, r, rec) {
			return
		}
		key, value := s.setting(o)
		h.logOverride(s, p, "set", key, value, "by", by)
		writeJSON(w, http.StatusOK, "application/json", s.answer(p.String(), &o))
	}
}

// deleteKeyOverride is DELETE .../keys/{key} of the scope of: the
// runtime override of that pattern is removed (204); 404 when there is
// none.
func (h *httpDoor) deleteKeyOverride(of scopeOf) func(w http.ResponseWriter, r *http.Request, by string) {
	return func(w http.ResponseWriter, r *http.Request, by string) {
		s, p, ok := overridePatternOf(w, r, of)
		if !ok {
			return
		}
		if !h.removeOverride(w, r, s.target(), p, s.table().Get(p)) {
			return
		}
		h.logOverride(s, p, "removed", "by", by)
		w.WriteHeader(http.StatusNoContent)
	}
}

// overridePatternOf resolves the scope and {key}, the override a PUT or
// DELETE is about: 404 as of, 400 for a key that is not a pattern, or for
// a scope with one key, which has no keys to override.
func overridePatternOf(w http.ResponseWriter, r *http.Request, of scopeOf) (overrideScope, overrides.Pattern, bool) {
	s, ok := of(w, r)
	if !ok {
		return nil, overrides.Pattern{}, false
	}
	if field, err := s.keyed(); err != nil {
		badRequest(w, r, field, err)
		return nil, overrides.Pattern{}, false
	}
	p, ok := patternOf(w, r)
	return s, p, ok
}

// logOverride logs that the override of pattern p of s was set or
// removed (action), with more after its scope and pattern.
func (h *httpDoor) logOverride(s overrideScope, p overrides.Pattern, action string, more ...any) {
	args := append(s.logArgs(), "key_hash", queue.KeyHash(p.String()), "prefix", p.Prefix)
	h.o.Logger.Info("door: "+s.kind()+" override "+action, append(args, more...)...)
}

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
