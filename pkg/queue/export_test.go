package queue

import "github.com/nats-io/nats.go"

// MessageOf is j's message for d as the Publisher builds it, for
// BenchmarkPublish's raw JetStream side (tests only).
func MessageOf(j *Job, d Destination) (*nats.Msg, error) { return j.message(d) }
