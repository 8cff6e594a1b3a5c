package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// A queue's READY and BACKLOG streams allow direct gets (StreamConfig): a
// handle whose stream info says so reads a message with
// $JS.API.DIRECT.GET, which any replica answers with the raw message,
// where a stream message get is an API request only the stream's leader
// answers, in JSON with the message in base64. A replica may lag behind
// the leader: it may answer "no such message" for one stored already, or
// return one deleted already.
//
// Each reader decides what that costs it. A stale message is a job read
// that ran already: at worst it runs again, which the drain's at-least-once
// contract allows. A false "no such message" is worse where it settles
// something — a grant acked as "settled already", a backlog key taken as
// read to its end, a job taken as gone: the job would wait in the backlog
// with nobody to start it. Those readers use a Stream handle (Stream),
// whose GetMsg confirms each "no such message" with the stream's leader.
// Views (keys, positions, estimates) read directly and live with the lag.

// confirmed is a stream handle that reads directly and confirms every
// "no such message" with the stream's leader.
type confirmed struct {
	jetstream.Stream
	js jetstream.JetStream

	mu     sync.Mutex
	leader jetstream.Stream // the same stream, its gets answered by its leader; opened at the first need
}

// Stream opens a handle on stream name whose GetMsg is a direct get when
// the stream allows them, a "no such message" answer being read again from
// the stream's leader: it is found only when the stream holds no such
// message. Its other methods are jetstream.Stream's. Open it after the
// stream's config is in force (EnsureStreams): a handle takes the config of
// when it was opened.
func Stream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, name)
	if err != nil || !s.CachedInfo().Config.AllowDirect {
		return s, err
	}
	return &confirmed{Stream: s, js: js}, nil
}

// GetMsg reads the message at seq (with WithGetMsgSubject, the first of
// the subject from seq on) from any replica, and a "no such message" again
// from the stream's leader.
func (s *confirmed) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	m, err := s.Stream.GetMsg(ctx, seq, opts...)
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return m, err
	}
	return s.leaderGetMsg(ctx, seq, opts...)
}

// leaderGetMsg reads from the stream's leader.
func (s *confirmed) leaderGetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	leader, err := s.leaderHandle(ctx)
	if err != nil {
		return nil, err
	}
	return leader.GetMsg(ctx, seq, opts...)
}

// leaderHandle is a second handle on the stream whose gets its leader
// answers: a handle reads directly when the stream info it holds allows
// direct gets, and this one's info, its own and read by nobody else, says
// otherwise.
func (s *confirmed) leaderHandle(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leader != nil {
		return s.leader, nil
	}
	name := s.CachedInfo().Config.Name
	leader, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	leader.CachedInfo().Config.AllowDirect = false
	if leader.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("queue: stream %s: no handle reads from the stream's leader", name)
	}
	s.leader = leader
	return leader, nil
}

// leaderGetMsg reads the message at seq of s from the stream's leader
// when s is a Stream handle, as s reads it otherwise.
func leaderGetMsg(ctx context.Context, s jetstream.Stream, seq uint64) (*jetstream.RawStreamMsg, error) {
	if c, ok := s.(*confirmed); ok {
		return c.leaderGetMsg(ctx, seq)
	}
	return s.GetMsg(ctx, seq)
}
