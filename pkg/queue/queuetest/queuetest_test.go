package queuetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Two servers side by side are separate; a message JetStream acknowledged
// survives a restart on the same port and store; clients reconnect.
func TestServerIsolatedAndDurable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := queuetest.Start(t), queuetest.Start(t)
	if a.URL() == b.URL() {
		t.Fatalf("two servers on one URL %s", a.URL())
	}
	js := a.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream(t).Stream(ctx, "T"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the other server sees stream T: %v", err)
	}

	url := a.URL()
	a.Restart(t)
	if a.URL() != url {
		t.Fatalf("restarted on %s, want %s", a.URL(), url)
	}
	// The old connection reconnects by itself.
	var msg jetstream.RawStreamMsg
	for {
		s, err := js.Stream(ctx, "T")
		if err == nil {
			m, err := s.GetMsg(ctx, 1)
			if err == nil {
				msg = *m
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream T not readable after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(msg.Data) != "kept" {
		t.Fatalf("after restart message 1 is %q, want kept", msg.Data)
	}
}

func TestShutdownRefusesConnections(t *testing.T) {
	t.Parallel()
	s := queuetest.Start(t)
	s.Shutdown()
	if nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second)); err == nil {
		nc.Close()
		t.Fatalf("connected to %s after Shutdown", s.URL())
	}
	s.Shutdown() // twice is fine
}
