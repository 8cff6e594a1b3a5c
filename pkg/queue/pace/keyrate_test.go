package pace_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// A key's pushback on an adaptive leak cuts that key's own rate, as a
// queue's pushback cuts the queue's: to 7/10 of its rate (the max when it
// was never cut), not again during its pause or within 250 ms after it,
// then from the rate it climbed back to; the cut reaches another worker
// through the key's entry, a pause without a cut keeps it, and the rate
// is back at the max 40 s after the cut. Another key is not slowed.
func TestKeyPushbackCutsTheKeysOwnRate(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	kv, err := pace.OpenKeyPushbackBucket(t.Context(), srv.JetStream(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	maxRate := bucket.Rate{Count: 40, Per: time.Second}
	now := time.Now()
	a := pace.NewKeyPauses()
	pace.SetKeyPausesClock(a, func() time.Time { return now })
	const p, q = "pppppppppppppppppppppppppp", "qqqqqqqqqqqqqqqqqqqqqqqqqq"
	if r, cut := a.Rate(p, now, maxRate); r != 40_000 || cut {
		t.Fatalf("before any pushback: %d/1000 s, cut %v; want the max, not cut", r, cut)
	}
	if _, err := a.PauseCut(t.Context(), kv, "hooks", p, time.Second, maxRate); err != nil {
		t.Fatal(err)
	}
	if r, cut := a.Rate(p, now, maxRate); r != 28_000 || !cut {
		t.Fatalf("after a pushback: %d/1000 s, cut %v; want 28000, cut", r, cut)
	}
	if r, cut := a.Rate(q, now, maxRate); r != 40_000 || cut {
		t.Errorf("another key after p's pushback: %d/1000 s, cut %v; want the max", r, cut)
	}
	now = now.Add(500 * time.Millisecond) // inside the pause: the same overload
	if _, err := a.PauseCut(t.Context(), kv, "hooks", p, time.Second, maxRate); err != nil {
		t.Fatal(err)
	}
	climbed, _ := a.Rate(p, now, maxRate)
	if climbed < 28_000 || climbed > 30_000 {
		t.Fatalf("a pushback inside the pause cut again: %d/1000 s", climbed)
	}
	now = now.Add(2 * time.Second) // the pause (to 1.5 s) is over by more than 250 ms
	from, _ := a.Rate(p, now, maxRate)
	if _, err := a.PauseCut(t.Context(), kv, "hooks", p, time.Second, maxRate); err != nil {
		t.Fatal(err)
	}
	if r, _ := a.Rate(p, now, maxRate); r != from*7/10 {
		t.Fatalf("a pushback after the pause: %d/1000 s, want 7/10 of %d", r, from)
	}
	cutAt := now
	// A pause without a cut (Pause) keeps the cut in the entry.
	now = now.Add(3 * time.Second)
	if _, err := a.Pause(t.Context(), kv, "hooks", p, time.Second); err != nil {
		t.Fatal(err)
	}
	b := pace.NewKeyPauses()
	known := make(chan struct{})
	go b.Run(t.Context(), kv, "hooks", slog.New(slog.DiscardHandler), known)
	<-known
	want, _ := a.Rate(p, now, maxRate)
	if r, cut := b.Rate(p, now, maxRate); r != want || !cut {
		t.Errorf("another worker's view of p's rate: %d/1000 s, cut %v; want %d, cut", r, cut, want)
	}
	if r, cut := b.Rate(p, cutAt.Add(pace.LeakClimb+pace.LeakProbe), maxRate); r != 40_000 || cut {
		t.Errorf("40 s after the cut: %d/1000 s, cut %v; want the max", r, cut)
	}
}
