// Package client is the Go client of a Spillway admitter, for producers:
// it submits jobs to a queue over either front door, HTTP or NATS
// request-reply, and reads, waits for and cancels them
// (docs/design.md#go-client).
//
//	c, err := client.NewHTTP("http://127.0.0.1:8080", client.WithAPIKey(key))
//	// or: c, err := client.NewNATS(nc)
//	ans, err := c.Submit(ctx, "email", payload, client.WithHeader("X-Api-Key", tenant))
//	job, err := c.Wait(ctx, ans.ID)
//
// A Client is safe for concurrent use. Make one per admitter (or NATS
// connection) and share it; Submit is what most callers want. The wire
// types it sends and reads — headers, priority, states, a job's record,
// problem types — are package spillway's, which imports nothing; this
// package imports no other of Spillway's.
//
// # Answers
//
// The admitter admits a job (it runs at once), queues it (it waits in the
// backlog, with a place, an earliest start and an estimated start), or
// rejects it (nothing taken; retry after a while). Submit returns an
// Answer for all three. A rejection also returns an error matching
// ErrRejected, so that code which checks only errors never takes a
// rejected job for a taken one. A submission whose idempotency key was
// seen before is answered with the first one's answer, marked Duplicate.
//
// # Idempotency and retries
//
// Every submission carries an Idempotency-Key: a UUIDv7 the client
// generates, or the caller's (WithIdempotencyKey). When an attempt gets
// no answer (a broken connection, a timeout, no admitter on the NATS
// subject) or a 503, the client sends it again with the same key, a
// bounded number of times with backoff (WithRetries). A job taken though
// its answer was lost is then answered as a duplicate: the retry never
// makes a second job. WithoutIdempotencyKeys turns the generated keys off
// (a load generator measuring the plain path); such submissions are not
// retried after a lost answer.
//
// # Errors
//
// Answers other than a verdict are *ProblemError: the HTTP door's problem
// document, or the NATS door's error reply, with the HTTP status the
// problem has on either door, its type, detail, the field at fault and
// Retry-After. They match the sentinels with errors.Is: ErrBadRequest
// (400), ErrUnauthorized (401), ErrForbidden (403), ErrNotFound (404),
// ErrConflict (409), ErrTooLarge (413), ErrRejected and its reasons
// (429), ErrUnavailable (503), ErrInternal (other 5xx). An exchange that
// got no answer is a *TransportError wrapping its cause. Options that
// cannot be used are ErrInvalidOption, before anything is sent.
//
// # Following a job
//
// Status reads a job's status record — a spillway.Job, the same on
// either door: GET /v1/jobs/{id}, or a request on spillway.job.<id> that
// one admitter answers. Wait reads it every poll interval until it is
// final (succeeded, dead, expired, cancelled or superseded). Cancel takes a queued job
// out of the backlog. The record is advisory: it may lag the job by a
// step. The client never reads the admitter's storage: what it knows of
// a job is what an admitter answers.
//
// # Queues and admin calls
//
// Over HTTP the client also reads the admitter's queues (Queues, Queue,
// Keys) and, with an admin key, pauses and resumes a queue (Pause,
// Resume) and reads and sets its keys' limits at run time (Limits,
// KeyLimit, SetKeyLimit, DeleteKeyLimit). The NATS door has none of these:
// a client of it returns errors.ErrUnsupported.
//
// # Batches
//
// SubmitBatch sends up to MaxBatch jobs in one request; each is decided
// as if it were alone. PrepareBatch and SubmitPrepared encode a batch
// once and send it many times.
package client
