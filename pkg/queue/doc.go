// Package queue is Spillway's durable, bounded FIFO on NATS JetStream: the
// streams of a queue, the publisher and the paced drainer (DESIGN §2, §4).
//
// # Subjects
//
// Queue names are validated (ValidateQueueName) so that they are safe in
// stream names, subjects, URLs and metric labels. A client key never
// appears in a subject: KeyToken turns it into a fixed 26-character token
// (128 bits of SHA-256, base32), so keys holding '.', '*', '>', spaces or
// invalid UTF-8 cannot change a subject, and per-key limits (JetStream's
// MaxMsgsPerSubject) apply to exactly one key.
package queue
