package queue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// apiGets counts the direct gets and the stream message gets of stream;
// settled checks the counts since the last check: one subscription sees
// every message, and a marker published after the reads arrives after
// theirs.
func apiGets(t *testing.T, srv *queuetest.Server, stream string) (settled func(wantDirect, wantLeader int)) {
	t.Helper()
	nc := srv.Connect(t)
	var direct, leader int
	mark := make(chan struct{})
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		switch {
		case m.Subject == "test.mark":
			mark <- struct{}{}
		case strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET."+stream):
			direct++
		case m.Subject == "$JS.API.STREAM.MSG.GET."+stream:
			leader++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func(wantDirect, wantLeader int) {
		t.Helper()
		if err := nc.Publish("test.mark", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-mark:
		case <-time.After(10 * time.Second):
			t.Fatal("the marker did not come back")
		}
		if direct != wantDirect || leader != wantLeader {
			t.Errorf("direct gets %d, leader's gets %d; want %d and %d", direct, leader, wantDirect, wantLeader)
		}
		direct, leader = 0, 0
	}
}

// The backlog is read with direct gets; a "no such message" is read again
// from the stream's leader, and only that read's answer counts: a message
// there is found even when the direct get says otherwise (a lagging
// replica), and a message that is not there is not found.
func TestStreamConfirmsNotFound(t *testing.T) {
	t.Parallel()
	ctx, q := queuetest.StartQueue(t, queuetest.QueueConfig("email"))
	name := queue.StreamName("email", queue.Backlog)
	job := queuetest.NewJob(t, "email", "k")
	ack, err := q.Pub.Publish(ctx, queue.Backlog, job)
	if err != nil {
		t.Fatal(err)
	}
	settled := apiGets(t, q.Server, name)

	s, err := queue.Stream(ctx, q.JS, name)
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowDirect {
		t.Fatal("the backlog does not allow direct gets")
	}
	m, err := s.GetMsg(ctx, ack.Sequence)
	if err != nil || m.Header.Get(spillway.HeaderJobID) != job.ID || m.Sequence != ack.Sequence {
		t.Fatalf("GetMsg(%d) = %v, %v; want job %s", ack.Sequence, m, err, job.ID)
	}
	settled(1, 0) // found directly: no second read
	if _, err := s.GetMsg(ctx, ack.Sequence+1); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("GetMsg(%d) = %v; want not found", ack.Sequence+1, err)
	}
	settled(1, 1) // not found directly, then from the leader
	if _, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(queue.Subject("email", queue.Backlog, "other"))); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("first job of another key: %v; want not found", err)
	}
	settled(1, 1)

	// A replica that lags: every direct get says "no such message".
	lagging, lied := q.Server.LaggingDirect(t, name)
	ls, err := queue.Stream(ctx, lagging, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, get := range []func() (*jetstream.RawStreamMsg, error){
		func() (*jetstream.RawStreamMsg, error) { return ls.GetMsg(ctx, ack.Sequence) },
		func() (*jetstream.RawStreamMsg, error) {
			return ls.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(queue.Subject("email", queue.Backlog, "k")))
		},
	} {
		m, err := get()
		if err != nil || m.Sequence != ack.Sequence {
			t.Fatalf("through a lagging replica: %v, %v; want job %s at %d", m, err, job.ID, ack.Sequence)
		}
	}
	if _, err := ls.GetMsg(ctx, ack.Sequence+1); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("through a lagging replica, GetMsg(%d) = %v; want not found", ack.Sequence+1, err)
	}
	if n := lied.Load(); n != 3 {
		t.Errorf("the lagging replica answered %d direct gets, want 3: the reads did not go direct", n)
	}

	// A delete that fails on a message deleted already is no error: the
	// leader says it is gone.
	if err := queue.RemoveMsg(ctx, ls, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	if err := queue.RemoveMsg(ctx, ls, ack.Sequence); err != nil {
		t.Errorf("removing a message removed already: %v", err)
	}
}
