package kvwatch_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/pkg/queue/internal/kvwatch"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// seen is one entry as apply was given it.
type seen struct {
	key   string
	op    jetstream.KeyValueOp
	value string
}

// setup opens bucket "watched" on a server of the test's own and returns
// it with its JetStream.
func setup(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js := queuetest.Start(t).JetStream(t)
	kv, err := js.CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "watched", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// run runs kvwatch.Run of keys until the test ends, and returns the
// channel known is closed on and the entries apply is given, in order.
func run(t *testing.T, kv jetstream.KeyValue, keys string, log *slog.Logger) (<-chan struct{}, <-chan seen) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	known := make(chan struct{})
	entries := make(chan seen, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		kvwatch.Run(ctx, kv, keys, known, log, "the test's entries", func(e jetstream.KeyValueEntry) {
			entries <- seen{e.Key(), e.Operation(), string(e.Value())}
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return known, entries
}

func put(t *testing.T, kv jetstream.KeyValue, key, value string) {
	t.Helper()
	if _, err := kv.Put(t.Context(), key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

// next waits for the next entry apply is given, which must be want.
func next(t *testing.T, entries <-chan seen, want seen) {
	t.Helper()
	select {
	case got := <-entries:
		if got != want {
			t.Fatalf("apply got %+v, want %+v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("apply got nothing in 10s, want %+v", want)
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not in 10s", what)
	}
}

// Run gives apply the values at the start, closes known, then gives it
// every put and delete of the keys it watches, and no other key's.
func TestRunFollowsTheKeys(t *testing.T) {
	t.Parallel()
	_, kv := setup(t)
	put(t, kv, "q.a", "1")
	put(t, kv, "other.a", "not watched")
	known, entries := run(t, kv, "q.*", slog.New(slog.DiscardHandler))
	next(t, entries, seen{"q.a", jetstream.KeyValuePut, "1"})
	wait(t, known, "known closed after the values at the start")
	put(t, kv, "other.b", "not watched")
	put(t, kv, "q.b", "2")
	next(t, entries, seen{"q.b", jetstream.KeyValuePut, "2"})
	if err := kv.Delete(t.Context(), "q.a"); err != nil {
		t.Fatal(err)
	}
	next(t, entries, seen{"q.a", jetstream.KeyValueDelete, ""})
	select {
	case e := <-entries:
		t.Errorf("apply got %+v, want nothing more", e)
	default:
	}
}

// A watch that fails is logged and started again: once the bucket is
// back, apply gets its values and known is closed.
func TestRunWatchesAgainAfterAFailure(t *testing.T) {
	t.Parallel()
	js, kv := setup(t)
	if err := js.DeleteKeyValue(t.Context(), "watched"); err != nil {
		t.Fatal(err)
	}
	failed := make(logged, 16)
	known, entries := run(t, kv, "q.*", slog.New(failed))
	select {
	case r := <-failed:
		if r.Level != slog.LevelWarn || r.Message != "watching the test's entries failed; watching again" {
			t.Errorf("logged %s %q, want a warning that the watch failed", r.Level, r.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watch of a deleted bucket: no failure logged in 10s")
	}
	select {
	case <-known:
		t.Fatal("known closed before any value was delivered")
	default:
	}
	kv, err := js.CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "watched", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	put(t, kv, "q.a", "back")
	next(t, entries, seen{"q.a", jetstream.KeyValuePut, "back"})
	wait(t, known, "known closed once the bucket is back")
}

// logged is a slog.Handler that sends each record it can to the channel.
type logged chan slog.Record

func (l logged) Enabled(context.Context, slog.Level) bool { return true }
func (l logged) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logged) WithGroup(string) slog.Handler            { return l }
func (l logged) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r:
	default:
	}
	return nil
}
