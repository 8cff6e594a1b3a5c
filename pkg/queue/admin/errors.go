package admin

import "errors"

// Errors of OpenDeadLetters and DeadLetters.Replay.
var (
	// ErrNoStream: a stream of the queue does not exist (a worker creates
	// them when it first runs the queue).
	ErrNoStream = errors.New("admin: no such stream")
	// ErrNoJetStream: the NATS server has no JetStream.
	ErrNoJetStream = errors.New("admin: NATS has no JetStream")
)

// ErrNotThisJob is wrapped by CancelBacklogJob's error when the backlog
// message at the given sequence is another job: nothing is deleted.
var ErrNotThisJob = errors.New("admin: the backlog message is another job")
