package worker

import "errors"

// ErrJobCancelled is what a StartGate returns for a job that was
// cancelled: the worker deletes its backlog message and runs nothing.
var ErrJobCancelled = errors.New("worker: job cancelled")
