package queue

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Room is how full a queue's READY and backlog are at one moment, with
// their bounds: for a caller about to publish a run of jobs that must know
// whether JetStream could refuse any of them (the admitter's batch submit,
// docs/design.md#batches). A bound of 0 or less is no bound.
type Room struct {
	Ready, ReadyCapacity              int64
	Backlog, Capacity, PerKeyCapacity int64
}

// ReadRoom reads queue's Room: one stream-info request per stream.
func ReadRoom(ctx context.Context, js jetstream.JetStream, queue string) (Room, error) {
	var r Room
	for _, d := range [...]Destination{Ready, Backlog} {
		s, err := js.Stream(ctx, StreamName(queue, d))
		if err != nil {
			return Room{}, fmt.Errorf("queue: reading the room of %s: stream %s: %w", queue, StreamName(queue, d), err)
		}
		info := s.CachedInfo()
		if d == Ready {
			r.Ready, r.ReadyCapacity = int64(info.State.Msgs), info.Config.MaxMsgs
			continue
		}
		r.Backlog, r.Capacity, r.PerKeyCapacity = int64(info.State.Msgs), info.Config.MaxMsgs, info.Config.MaxMsgsPerSubject
	}
	return r, nil
}

// Fits reports whether ready more jobs in READY and backlog more in the
// backlog are certain to be stored if nobody else stores any meanwhile:
// every bound holds them, the key's too whichever keys they have (a key
// holds at most the whole backlog). Releases and deletions only make room.
func (r Room) Fits(ready, backlog int64) bool {
	within := func(have, more, bound int64) bool { return bound <= 0 || have+more <= bound }
	return within(r.Ready, ready, r.ReadyCapacity) &&
		within(r.Backlog, backlog, r.Capacity) &&
		within(r.Backlog, backlog, r.PerKeyCapacity)
}
