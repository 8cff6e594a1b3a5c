package door

import (
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Every submission and every request about a job has a caller: the API
// key it carries, named by its fingerprint (KeyFingerprint), the same on
// both doors. A job belongs to its submitter: another caller's read or
// cancel of it is answered as one of an unknown job, and admin keys see
// and cancel every job. With no API keys at all the caller is anonymous
// (""), and every job is everyone's.

// caller is who sends a request.
type caller struct {
	// id is the fingerprint of the caller's key; "" for anonymous.
	id string
	// admin: an admin key (http.admin_keys_file), which may do what a
	// submit key may, and read and cancel every job.
	admin bool
}

// callerOf resolves the key a request carries ("" for none) against the
// submit keys and the admin keys; ok is false for a request the doors
// must refuse as unauthorized: submit keys are configured and key is
// neither one of them nor an admin key. Without submit keys the doors are
// open: a caller without an admin key is anonymous.
func callerOf(keys, adminKeys *APIKeys, key string) (c caller, ok bool) {
	switch {
	case key != "" && adminKeys.has(key):
		return caller{id: KeyFingerprint(key), admin: true}, true
	case keys.empty():
		return caller{}, true
	case key != "" && keys.has(key):
		return caller{id: KeyFingerprint(key)}, true
	}
	return caller{}, false
}

// owns reports whether c may read and cancel the job of record rec: its
// submitter, or an admin. Anonymous callers own the anonymous jobs.
func (c caller) owns(rec jobstatus.Record) bool { return c.admin || rec.Submitter == c.id }

// httpCaller is the caller of r.
func (h *httpDoor) httpCaller(r *http.Request) (caller, bool) {
	return callerOf(h.o.Keys, h.o.AdminKeys, requestKey(r))
}

// NATSAccess says whom the NATS doors answer, and where.
type NATSAccess struct {
	// Keys and AdminKeys are the HTTP door's: a request carries one as
	// the header Authorization: Bearer KEY or X-Api-Key. With Keys set, a
	// request without a valid key is answered unauthorized.
	Keys, AdminKeys *APIKeys
	// ReplyPrefix is the subject prefix answers may go to (config
	// nats.reply_prefix; "" means config.DefaultReplyPrefix). A request
	// with another reply subject is dropped: nothing is done and nothing
	// answered, so that a producer cannot have the admitter publish on a
	// subject of its choosing (a KV key, a JetStream API subject).
	ReplyPrefix string
	// Dropped, if set, is told of each request dropped, with the reason
	// ("reply_subject"); it must be safe for concurrent use.
	Dropped func(reason string)
}

// DropReplySubject is NATSAccess.Dropped's reason for a request whose
// reply subject is not under the reply prefix.
const DropReplySubject = "reply_subject"

// defaultReplyPrefix is config.DefaultReplyPrefix (the door does not read
// the configuration for it: the admitter hands it over).
const defaultReplyPrefix = "_INBOX."

// answers reports whether request m may be answered: it is a request
// (it has a reply subject) and its reply subject is under the reply
// prefix. A request that may not is counted and dropped.
func (a *NATSAccess) answers(m *nats.Msg) bool {
	if m.Reply == "" {
		return false // a publish, not a request: nobody would learn the answer
	}
	prefix := a.ReplyPrefix
	if prefix == "" {
		prefix = defaultReplyPrefix
	}
	if !strings.HasPrefix(m.Reply, prefix) || len(m.Reply) == len(prefix) {
		if a.Dropped != nil {
			a.Dropped(DropReplySubject)
		}
		return false
	}
	return true
}

// caller is the caller of request m.
func (a *NATSAccess) caller(m *nats.Msg) (caller, bool) {
	return callerOf(a.Keys, a.AdminKeys, natsKey(m.Header))
}

// natsKey is the key a NATS request carries, as Authorization: Bearer KEY
// or X-Api-Key (in any case); "" if none.
func natsKey(h nats.Header) string {
	key := headerGet(h, "X-Api-Key")
	if a := headerGet(h, "Authorization"); len(a) >= len("Bearer ") && strings.EqualFold(a[:len("Bearer ")], "Bearer ") {
		key = a[len("Bearer "):]
	}
	return key
}

// unauthorizedDetail says what an unauthorized request lacks, on both doors.
const unauthorizedDetail = "send a valid API key as Authorization: Bearer KEY or X-Api-Key"

// notYours is the problem of a job the caller may not see: the same as
// for an unknown job, so that it tells nothing of the job.
func notYours(id string) *spillway.Problem {
	return &spillway.Problem{Type: spillway.ProblemNotFound, Status: http.StatusNotFound, Title: "Unknown job",
		Detail: "no status for this job id (unknown, or older than status.ttl)", ID: id}
}
