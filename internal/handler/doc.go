// Package handler builds the worker.Handler that runs a queue's jobs in a
// worker, from the queue's handler config (docs/design.md#handlers): an HTTP webhook,
// a NATS request, or the dev-mode log handler. New picks the one a
// Config names; Config.Validate holds the rules of a handler's settings,
// which the configuration calls.
//
// # Headers
//
// Both the HTTP and the NATS handler send the job's payload, untouched,
// with these headers:
//
//	Spillway-Job-Id    the job id (a UUIDv7)
//	Spillway-Queue     the queue name
//	Spillway-Key       the client key the job was admitted under
//	Spillway-Attempt   this try's number, from 1
//	Idempotency-Key    the job id again, for downstreams that deduplicate
//	traceparent, tracestate, Content-Type
//	                   copied from the job's headers when it has them
//
// A job is delivered at least once: a retry, or a worker that crashed after
// the downstream finished, sends it again with the same Idempotency-Key.
//
// The client key is sent because the job's own downstream may need it (to
// bill or route by client); it is never logged. A key that is not a valid
// header value (it holds a control character) is sent percent-encoded, as
// url.PathEscape does, with the header Spillway-Key-Encoding: percent.
//
// # HTTP
//
// HTTP POSTs each job to the configured URL with the configured headers
// and maps the answer. Content-Type is the job's own, else the configured
// one, else application/octet-stream. The answers:
//
//	2xx                      success
//	429, 503                 retry; Retry-After (seconds or an HTTP-date) is
//	                         honoured through retry.After, capped at MaxRetryAfter;
//	                         retry.Pushback: the queue's leak pauses
//	                         (docs/design.md#pushback)
//	other 4xx                retry.Permanent: the job goes to the dead-letter stream
//	3xx                      retry.Permanent: a redirect that was not followed
//	5xx, timeout, no answer  retry on the queue's backoff schedule
//
// A failure's error reads like
//
//	POST http://127.0.0.1:9000/send: 500 Internal Server Error: <an excerpt of the body>
//
// and is a *StatusError when the downstream answered. The error becomes the
// job's last_error, which every submit key may read, so it names the URL
// by scheme, host and path only — never its user info or query, where
// credentials tend to live — and quotes at most 80 bytes of the body on one
// line, printable characters only (others become U+FFFD), "…" when cut. The response body is
// always drained (up to 64 KiB, so the connection can be reused) and closed.
//
// # NATS
//
// NATS sends each job as a request to the configured subject and waits for
// one reply within the timeout. No responders and no reply in time are
// retried. The reply says how the job went in its headers; its body is
// ignored unless it explains a failure:
//
//	Spillway-Status: ok          success (also when the header is absent
//	                             and there is no Spillway-Error)
//	Spillway-Status: retry       failed; try again on the backoff schedule,
//	                             or after Retry-After when the reply has one
//	Spillway-Status: permanent   failed for good: retry.Permanent, the job
//	                             goes to the dead-letter stream
//	Spillway-Status: busy        the responder is overloaded: retried as
//	                             retry, and retry.Pushback — the queue's
//	                             leak pauses for Retry-After (default 1s)
//	Spillway-Error: <message>    why it failed; without Spillway-Status it
//	                             means retry
//	Retry-After: <seconds or HTTP-date>
//	                             with retry or busy: the earliest next try,
//	                             capped at MaxRetryAfter
//
// Only busy pauses the leak: a retry with Retry-After says when this job
// may come back, not that the responder is overloaded.
//
// The status is case-insensitive; an unknown one is a retry, so that a
// responder speaking a newer protocol cannot lose a job. A failure's error
// is the Spillway-Error text (up to 256 bytes), else an excerpt of the
// reply body (up to 80 bytes), each on one line with only printable
// characters, "…" when cut.
package handler
