package spillway

// Subjects of the NATS door. Each is a prefix: the admitters answer
// requests on prefix.* in one queue group, so each request reaches one
// admitter, and a request with no admitter running fails at once with
// "no responders".
const (
	// SubmitPrefix + queue name is the subject a producer sends a job to.
	SubmitPrefix = "spillway.submit."
	// SubmitBatchPrefix + queue name is the subject a producer sends a
	// batch of jobs to (docs/design.md#batches).
	SubmitBatchPrefix = "spillway.submitbatch."
	// CancelPrefix + queue name is the subject a client sends a cancel
	// to: the job id in the body or in HeaderJobID.
	CancelPrefix = "spillway.cancel."
	// JobPrefix + job id is the subject a client asks a job's record on:
	// the reply is the Job that GET /v1/jobs/{id} answers, or a Problem
	// (ProblemContentType in the reply's Content-Type header).
	JobPrefix = "spillway.job."
)

// Request headers of a submission, on both doors. Names are matched
// without regard to case.
const (
	// HeaderCost is the units a job takes from its limits: an integer ≥ 1
	// (absent: 1).
	HeaderCost = "Spillway-Cost"
	// HeaderPriority is a submission's class in the backlog's drain:
	// high, normal or low (absent: normal). It orders the drain only; the
	// limits decide the same whatever the class.
	HeaderPriority = "Spillway-Priority"
	// HeaderIdempotencyKey makes a retried submission safe: a second one
	// with the same key is answered with the first one's answer and takes
	// nothing. The workers send it to handlers too, holding the job id.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderMsgID is NATS's own deduplication header; the NATS door reads
	// it as an idempotency key when HeaderIdempotencyKey is absent.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderNotBefore (an RFC 3339 time) or HeaderDelay (a Go duration)
	// schedules a job: it starts no earlier, within the queue's
	// backlog.max_delay (docs/design.md#scheduled-jobs).
	HeaderNotBefore = "Spillway-Not-Before"
	HeaderDelay     = "Spillway-Delay"
	// HeaderMaxWait (a Go duration) refuses a job that would start later
	// than that (ProblemWaitTooLong), and is the expiry of one that is
	// queued (docs/design.md#max-wait).
	HeaderMaxWait = "Spillway-Max-Wait"
	// HeaderDebounce (a Go duration > 0) debounces a job: it waits that
	// long in the backlog, and a newer job of the same queue and debounce
	// key (HeaderDebounceKey) submitted meanwhile supersedes it: only the
	// newest runs, the others end StateSuperseded (docs/design.md#debounce).
	HeaderDebounce = "Spillway-Debounce"
	// HeaderDebounceKey names a debounced job's group (absent: the job's
	// limit key, what its first enforcing tier keys on). Only with
	// HeaderDebounce.
	HeaderDebounceKey = "Spillway-Debounce-Key"
	// HeaderJobID names a job: the job to cancel on CancelPrefix
	// subjects, and the job a worker hands to its handler.
	HeaderJobID = "Spillway-Job-Id"
)

// Answer headers.
const (
	// HeaderStatus is an answer's status: a SubmitReply's Status, a
	// CancelReply's, a job reply's State (or "error" with a problem), and
	// a NATS handler's answer to a worker (HandlerOK, …).
	HeaderStatus = "Spillway-Status"
	// HeaderShadow is on an answer once per shadow tier that would not
	// have admitted the job: "<tier> would-queue" or "<tier>
	// would-reject" (docs/design.md#shadow-tiers).
	HeaderShadow = "Spillway-Shadow"
	// HeaderRetryAfter is how long to wait before trying again, in
	// seconds (or an HTTP date): on 429 and 503 answers of the HTTP door,
	// and read from handlers' pushback answers.
	HeaderRetryAfter = "Retry-After"
	// HeaderContentType tells a job reply (application/json) from a
	// Problem (ProblemContentType), on both doors.
	HeaderContentType = "Content-Type"
)

// Rate-limit headers of the HTTP door's answers decided by the tiers
// (docs/design.md#rate-limit-headers): the IETF draft's two, and the
// older X-RateLimit-* three.
const (
	HeaderRateLimitPolicy     = "RateLimit-Policy"
	HeaderRateLimit           = "RateLimit"
	HeaderXRateLimitLimit     = "X-RateLimit-Limit"
	HeaderXRateLimitRemaining = "X-RateLimit-Remaining"
	HeaderXRateLimitReset     = "X-RateLimit-Reset"
)

// Headers a worker sends a job's handler with, besides HeaderJobID and
// HeaderIdempotencyKey (which holds the job id), and the NATS handler's
// answer (docs/design.md#handlers).
const (
	// HeaderQueue is the job's queue.
	HeaderQueue = "Spillway-Queue"
	// HeaderKey is the job's client key (what its first tier keyed on).
	HeaderKey = "Spillway-Key"
	// HeaderKeyEncoding is "percent" when HeaderKey had to be
	// percent-encoded to be a valid header value.
	HeaderKeyEncoding = "Spillway-Key-Encoding"
	// HeaderAttempt is the try's number, from 1.
	HeaderAttempt = "Spillway-Attempt"
	// HeaderError is why a NATS handler's answer is not HandlerOK.
	HeaderError = "Spillway-Error"
	// HeaderSubmitter is who submitted the job: the fingerprint of the
	// API key it was submitted with (absent: no API keys, one tenant).
	// The admitter stamps it on the job, dropping any value a producer
	// sent; the job's status record and its dead letter keep it.
	HeaderSubmitter = "Spillway-Submitter"
)

// Values of HeaderStatus in a NATS handler's answer to a worker.
const (
	HandlerOK        = "ok"
	HandlerRetry     = "retry"
	HandlerPermanent = "permanent"
	// HandlerBusy: the handler is overloaded. The job is retried, as with
	// HandlerRetry, and the queue's leak pauses.
	HandlerBusy = "busy"
)

// IsToken reports whether s is an RFC 9110 token: what a header name, and
// a parameter such as a rate-limit policy's name, must be.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' ||
			c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}
