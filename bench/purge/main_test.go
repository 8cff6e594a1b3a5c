package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// purge empties the streams it names, exactly or by prefix, leaves the
// others as they are, and refuses a name that matches nothing.
func TestPurge(t *testing.T) {
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	for _, name := range []string{"READY", "KV_a-1", "KV_a-2", "OTHER"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := js.Publish(ctx, strings.ToLower(name)+".x", []byte("job")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := run(srv.URL(), []string{"READY", "KV_a-*"}); err != nil {
		t.Fatalf("purge: %v", err)
	}
	for name, want := range map[string]uint64{"READY": 0, "KV_a-1": 0, "KV_a-2": 0, "OTHER": 3} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().State.Msgs; got != want {
			t.Errorf("%s holds %d messages, want %d", name, got, want)
		}
	}
	if err := run(srv.URL(), []string{"NOPE"}); err == nil || !strings.Contains(err.Error(), `no stream "NOPE"`) {
		t.Errorf("purge of a stream that is not there: %v, want an error naming it", err)
	}
}
