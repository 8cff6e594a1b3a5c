package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Pending is a job waiting in a backlog, as the drain orders it.
type Pending struct {
	Sequence uint64
	Subject  string
	// Due is when the drain may release the job: its not-before, or when
	// it was queued. A message that is not a valid job is due at once
	// (the drain dead-letters it without taking a start).
	Due time.Time
}

func pendingOf(m *jetstream.RawStreamMsg) Pending {
	p := Pending{Sequence: m.Sequence, Subject: m.Subject}
	if j, err := ParseJob(m.Header, nil); err == nil {
		p.Due = j.NotBefore
		if p.Due.IsZero() {
			p.Due = j.EnqueuedAt
		}
	}
	return p
}

// BacklogKeyHead reads the first job of key and class in queue's backlog:
// the job whose release frees the first place of the key's jobs of that
// class. found is false when there is none.
func BacklogKeyHead(ctx context.Context, js jetstream.JetStream, queue, key string, class spillway.Priority) (p Pending, found bool, err error) {
	s, err := js.Stream(ctx, StreamName(queue, Backlog))
	if err != nil {
		return Pending{}, false, fmt.Errorf("queue: backlog of %s: %w", queue, err)
	}
	m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(classSubject(queue, Backlog, class, KeyToken(key))))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Pending{}, false, nil
	}
	if err != nil {
		return Pending{}, false, fmt.Errorf("queue: backlog of %s: first job of a key: %w", queue, err)
	}
	return pendingOf(m), true, nil
}

// ScanBacklog reads the first max jobs of queue's backlog in stream order,
// one get each (the payloads come too: a work-queue stream takes no second
// consumer, so there is no headers-only reader). complete reports that
// they are all the backlog held. Jobs past a scan that is not complete were
// queued after the last one read, so none is due before that job was
// queued.
func ScanBacklog(ctx context.Context, js jetstream.JetStream, queue string, max int) (jobs []Pending, complete bool, err error) {
	s, err := js.Stream(ctx, StreamName(queue, Backlog))
	if err != nil {
		return nil, false, fmt.Errorf("queue: backlog of %s: %w", queue, err)
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return nil, true, nil
	}
	filter := SubjectFilter(queue, Backlog)
	for seq := st.FirstSeq; len(jobs) < max; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return jobs, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("queue: scanning the backlog of %s: %w", queue, err)
		}
		jobs = append(jobs, pendingOf(m))
		if m.Sequence >= st.LastSeq {
			return jobs, true, nil
		}
		seq = m.Sequence + 1
	}
	return jobs, false, nil
}
