package pace_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// A key's pause written by one worker reaches another through the shared
// entry (its watch, or its first look when it starts after the pause), is
// extended by a later pushback and never shortened, and is counted once by
// the worker that began it.
func TestKeyPausesAreSharedAndOnlyExtended(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	open := func() *pace.KeyPauses {
		kv, err := pace.OpenKeyPushbackBucket(t.Context(), srv.JetStream(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		k := pace.NewKeyPauses()
		known := make(chan struct{})
		go k.Run(t.Context(), kv, "hooks", slog.New(slog.DiscardHandler), known)
		<-known
		return k
	}
	kv, err := pace.OpenKeyPushbackBucket(t.Context(), srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := open()
	b := open()
	const token = "aaaaaaaaaaaaaaaaaaaaaaaaaa"
	until, err := a.Pause(t.Context(), kv, "hooks", token, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Until(token); !got.Equal(until) {
		t.Errorf("the writer's own view: paused until %v, want %v", got, until)
	}
	waitFor(t, "the other worker sees the pause", func() bool { return b.Until(token).Equal(until) })
	select {
	case <-b.Changed():
	default:
		t.Error("the other worker's Changed was not told")
	}
	// A shorter pushback does not shorten it, and begins no pause.
	if got, err := b.Pause(t.Context(), kv, "hooks", token, time.Second); err != nil || !got.Equal(until) {
		t.Errorf("a 1s pushback during a 5s pause: until %v (%v), want %v", got, err, until)
	}
	// A longer one extends it everywhere.
	longer, err := b.Pause(t.Context(), kv, "hooks", token, 10*time.Second)
	if err != nil || !longer.After(until) {
		t.Fatalf("a 10s pushback: until %v (%v), want after %v", longer, err, until)
	}
	waitFor(t, "the first worker sees the extension", func() bool { return a.Until(token).Equal(longer) })
	if a.Pauses() != 1 || b.Pauses() != 0 {
		t.Errorf("pauses begun: a %d, b %d, want 1 and 0 (b only extended a pause in force)", a.Pauses(), b.Pauses())
	}
	// A worker that starts later (a new leader) learns it from the entry.
	c := open()
	if got := c.Until(token); !got.Equal(longer) {
		t.Errorf("a worker started during the pause: until %v, want %v", got, longer)
	}
	n := 0
	c.Each(func(tk string, u time.Time) {
		n++
		if tk != token || !u.Equal(longer) {
			t.Errorf("Each: %s until %v, want %s until %v", tk, u, token, longer)
		}
	})
	if n != 1 {
		t.Errorf("Each: %d keys paused, want 1", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: still waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A worker holds only the keys paused lately, however many keys were
// paused over its life.
func TestKeyPausesForgetEndedPauses(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	kv, err := pace.OpenKeyPushbackBucket(t.Context(), srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	k := pace.NewKeyPauses()
	clock := time.Now()
	pace.SetKeyPausesClock(k, func() time.Time { return clock })
	for i := range 300 {
		if _, err := k.Pause(t.Context(), kv, "hooks", fmt.Sprintf("k%025d", i), time.Second); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(2 * time.Second) // the pause ended before the next
	}
	if n := pace.KeyPausesHeld(k); n > 64 {
		t.Errorf("after 300 pauses that ended one after the other: %d held, want at most 64", n)
	}
	if k.Pauses() != 300 {
		t.Errorf("pauses begun: %d, want 300", k.Pauses())
	}
}
