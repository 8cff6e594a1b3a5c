// Package spillway holds the wire types of a Spillway admitter's front
// doors (docs/design.md#doors): the names, values and JSON shapes that an
// admitter writes and its clients read. It is a leaf: the standard library
// only, no NATS, no project imports. The admitter's doors, the queue
// (pkg/queue and its stages), the workers' handler protocol, pkg/client
// and the examples all use it, so that every one of them spells a header,
// a priority, a state or a problem type the same way.
//
// # Headers and subjects
//
// A submission is a request to SubmitPrefix+queue over NATS or a POST to
// /v1/queues/{queue}/jobs over HTTP, with the same request headers on
// both: the key headers the queue's tiers name, HeaderCost,
// HeaderPriority, HeaderNotBefore or HeaderDelay, HeaderMaxWait and
// HeaderIdempotencyKey. The answer carries HeaderStatus and, per shadow
// tier that would not have admitted the job, HeaderShadow; over HTTP the
// rate-limit headers too (HeaderRateLimitPolicy, HeaderRateLimit,
// HeaderRetryAfter and the older X-RateLimit-* ones). A job's record is
// GET /v1/jobs/{id}, or a request to JobPrefix+id over NATS.
//
// A worker hands a job to its handler with HeaderJobID, HeaderQueue,
// HeaderKey (HeaderKeyEncoding when the key had to be escaped),
// HeaderAttempt and HeaderIdempotencyKey; a NATS handler answers with
// HeaderStatus (HandlerOK, HandlerRetry, HandlerPermanent, HandlerBusy)
// and HeaderError.
//
// # Answers
//
// SubmitReply is the answer to one submission on both doors: Status
// Admitted, Queued or Rejected, or Failed with a problem Type. A batch's
// answer is a BatchReply of one BatchResult per job; a NATS cancel's a
// CancelReply.
//
// # Problems
//
// Every error is a problem type: a stable URI (ProblemQueueFull,
// ProblemNotFound, …) that the HTTP door sends as a Problem document
// (RFC 9457, ProblemContentType) with the status StatusOf gives, and the
// NATS door in the reply's type field.
//
// # Jobs
//
// Job is a job's status record: its State (StateQueued, StateRunning,
// StateSucceeded, …; State.Final tells the ones a job does not leave),
// attempts, last error and times. Priority is a job's class in the
// backlog's drain.
//
// # Queues and limits
//
// QueueInfo, QueueList and KeyList are the reads of GET /v1/queues and
// /v1/queues/{queue}/keys; PauseRequest and PauseReply the admin pause;
// LimitList, KeyLimit and LimitParams the runtime overrides' endpoints;
// WeightList, KeyWeight and WeightRequest the fairness weights' ones.
package spillway
