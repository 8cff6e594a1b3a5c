package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// Info is what a queue looks like now: read from JetStream, so it is the
// same whichever process asks.
type Info struct {
	Queue string
	// Ready is the number of admitted jobs not yet finished: waiting,
	// running or waiting for a retry. ReadyCapacity is READY's bound.
	Ready         int64
	ReadyCapacity int64
	// Backlog is the number of queued jobs waiting for their start, or
	// running their first try (a backlog job runs from its backlog
	// message; a retry moves it to READY).
	Backlog int64
	// Capacity and PerKeyCapacity are the backlog's bounds.
	Capacity       int64
	PerKeyCapacity int64
	// Fill is Backlog/Capacity, 0 to 1.
	Fill float64
	// Dead is the number of jobs in the dead-letter stream.
	Dead int64
	// OldestAge is how long the oldest job of the backlog has waited
	// (0 when it is empty).
	OldestAge time.Duration
	// InFlight is the ready consumer's delivered, unacknowledged jobs:
	// running, or waiting for a retry (backlog jobs on their first try
	// count in BacklogHeld instead). MaxAckPending is its bound.
	InFlight      int
	MaxAckPending int
	// Redelivered counts ready jobs delivered more than once and not yet
	// finished.
	Redelivered int
	// BacklogHeld is how many backlog jobs workers hold for their start
	// or run on their first try;
	// BacklogPullers is how many pull requests wait on the backlog: 0 with
	// jobs waiting means no worker is draining it.
	BacklogHeld    int
	BacklogPullers int
	ReadyPullers   int
	// LeakRate is the backlog's drain rate from the queue's config.
	LeakRate bucket.Rate
	// EstimatedDrain is how long the backlog takes to drain at LeakRate if
	// nothing more arrives: Backlog / LeakRate.
	EstimatedDrain time.Duration
}

// Inspect reads a queue's state from its streams and consumers. cfg
// supplies what JetStream does not keep (the leak rate). A queue whose
// workers never ran has no consumers yet: their figures are 0.
func Inspect(ctx context.Context, js jetstream.JetStream, cfg queue.Config) (Info, error) {
	if err := cfg.Validate(); err != nil {
		return Info{}, err
	}
	var states [len(inspected)]*jetstream.StreamInfo
	for i, d := range inspected {
		s, err := js.Stream(ctx, queue.StreamName(cfg.Name, d))
		if err != nil {
			return Info{}, fmt.Errorf("admin: inspecting %s: stream %s: %w", cfg.Name, queue.StreamName(cfg.Name, d), err)
		}
		states[i] = s.CachedInfo()
	}
	ready, err := consumerInfo(ctx, js, queue.StreamName(cfg.Name, queue.Ready), worker.ReadyConsumer)
	if err != nil {
		return Info{}, err
	}
	grants, err := consumerInfo(ctx, js, queue.GrantsStreamName(cfg.Name), worker.GrantsConsumer)
	if err != nil {
		return Info{}, err
	}
	return infoOf(cfg, states, consumerFigures(ready, grants)), nil
}

// inspected are the streams whose state makes a queue's Info.
var inspected = [...]queue.Destination{queue.Ready, queue.Backlog, queue.Dead}

// consumers is what Info takes from a queue's two consumers.
type consumers struct {
	inFlight, maxAckPending, redelivered, readyPullers int
	backlogHeld, backlogPullers                        int
}

// consumerFigures takes them from the consumers' infos (nil: none yet).
func consumerFigures(ready, grants *jetstream.ConsumerInfo) consumers {
	var c consumers
	if ready != nil {
		c.inFlight, c.maxAckPending, c.redelivered, c.readyPullers = ready.NumAckPending, ready.Config.MaxAckPending, ready.NumRedelivered, ready.NumWaiting
	}
	if grants != nil {
		c.backlogHeld, c.backlogPullers = grants.NumAckPending, grants.NumWaiting
	}
	return c
}

// infoOf is the Info of queue cfg from its streams' states (inspected's
// order) and its consumers' figures.
func infoOf(cfg queue.Config, states [len(inspected)]*jetstream.StreamInfo, c consumers) Info {
	info := Info{Queue: cfg.Name, LeakRate: cfg.LeakRate}
	info.Ready = int64(states[0].State.Msgs)
	info.ReadyCapacity = max(0, states[0].Config.MaxMsgs)
	info.Backlog = int64(states[1].State.Msgs)
	info.Dead = int64(states[2].State.Msgs)
	info.Capacity = states[1].Config.MaxMsgs
	info.PerKeyCapacity = max(0, states[1].Config.MaxMsgsPerSubject)
	if info.Capacity > 0 {
		info.Fill = float64(info.Backlog) / float64(info.Capacity)
	}
	if info.Backlog > 0 && !states[1].State.FirstTime.IsZero() {
		info.OldestAge = max(0, time.Since(states[1].State.FirstTime))
	}
	if info.LeakRate.Count > 0 {
		info.EstimatedDrain = time.Duration(info.Backlog) * info.LeakRate.Per / time.Duration(info.LeakRate.Count)
	}
	info.InFlight, info.MaxAckPending, info.Redelivered, info.ReadyPullers = c.inFlight, c.maxAckPending, c.redelivered, c.readyPullers
	info.BacklogHeld, info.BacklogPullers = c.backlogHeld, c.backlogPullers
	return info
}

// consumerInfo is nil, without error, for a consumer that does not exist.
func consumerInfo(ctx context.Context, js jetstream.JetStream, stream, name string) (*jetstream.ConsumerInfo, error) {
	c, err := js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: consumer %s on %s: %w", name, stream, err)
	}
	return c.CachedInfo(), nil
}
