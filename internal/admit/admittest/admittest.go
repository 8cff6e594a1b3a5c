package admittest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Core is what an admitter under test stands on: its configuration and
// the parts admit.Options needs, on one JetStream.
type Core struct {
	JS          jetstream.JetStream
	Config      *config.Config
	Publisher   *queue.Publisher
	Store       *admit.Failover
	Idempotency *admit.Idempotency
}

// NewCore loads the configuration yaml, creates every queue's streams in
// memory on nc's JetStream, and opens a publisher and the idempotency
// bucket (keys kept an hour, one replica). store decides (nil: a
// failover store over the in-memory store alone).
func NewCore(tb testing.TB, nc *nats.Conn, yaml string, store *admit.Failover) *Core {
	tb.Helper()
	c := &Core{Config: LoadConfig(tb, yaml), Store: store}
	var err error
	if c.JS, err = jetstream.New(nc); err != nil {
		tb.Fatal(err)
	}
	EnsureStreams(tb, c.JS, c.Config)
	if c.Publisher, err = queue.NewPublisher(c.JS, queue.DefaultMaxInFlight); err != nil {
		tb.Fatal(err)
	}
	if c.Store == nil {
		if c.Store, err = admit.NewFailover(nil, ""); err != nil {
			tb.Fatal(err)
		}
	}
	if c.Idempotency, err = admit.OpenIdempotency(context.Background(), c.JS, time.Hour, 1, nil); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Options is admit.Options with the core's JetStream, publisher, store
// and idempotency; the test adds metrics and hooks of its own.
func (c *Core) Options() admit.Options {
	return admit.Options{JS: c.JS, Publisher: c.Publisher, Store: c.Store, Idempotency: c.Idempotency}
}

// LoadConfig writes yaml to a file in the test's temporary directory and
// loads it with config.Load, without overrides.
func LoadConfig(tb testing.TB, yaml string) *config.Config {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "spillway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path, nil, config.Overrides{})
	if err != nil {
		tb.Fatalf("config:\n%s\n%v", yaml, err)
	}
	return cfg
}

// EnsureStreams creates the streams of every queue of cfg on js, in
// memory rather than in files.
func EnsureStreams(tb testing.TB, js jetstream.JetStream, cfg *config.Config) {
	tb.Helper()
	for _, q := range cfg.Queues {
		c := q.Backlog
		c.Memory = true
		if err := queue.EnsureStreams(context.Background(), js, c); err != nil {
			tb.Fatal(err)
		}
	}
}

// Msgs is the number of messages in queue q's stream d.
func Msgs(tb testing.TB, js jetstream.JetStream, q string, d queue.Destination) uint64 {
	tb.Helper()
	s, err := js.Stream(context.Background(), queue.StreamName(q, d))
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Msgs
}

// LastOfKey is the last message stored for key in queue q's stream d, in
// any priority class's subject (queue.ClassSubject); the error is the
// last lookup's when the key has none.
func LastOfKey(tb testing.TB, js jetstream.JetStream, q string, d queue.Destination, key string) (*jetstream.RawStreamMsg, error) {
	tb.Helper()
	s, err := js.Stream(context.Background(), queue.StreamName(q, d))
	if err != nil {
		tb.Fatal(err)
	}
	if d == queue.Ready {
		// READY's subjects name the job, not its key: the key is in each
		// job's headers, read from the last message back.
		info, err := s.Info(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0; seq-- {
			m, err := s.GetMsg(context.Background(), seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if m.Header.Get(spillway.HeaderKey) == key {
				return m, nil
			}
		}
		return nil, jetstream.ErrMsgNotFound
	}
	var last *jetstream.RawStreamMsg
	for _, p := range spillway.Priorities {
		m, gerr := s.GetLastMsgForSubject(context.Background(), queue.ClassSubject(q, d, key, p))
		if gerr != nil {
			err = gerr
			continue
		}
		if last == nil || m.Sequence > last.Sequence {
			last = m
		}
	}
	if last == nil {
		return nil, err
	}
	return last, nil
}

// WaitFor polls cond until it holds, and fails the test if it does not
// within timeout; what names the wait in the failure.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
