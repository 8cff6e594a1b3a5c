package retry_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/retry"
)

// A pushback says the downstream is overloaded: IsPushback finds it through
// wrapping, with the Retry-After it carried, and the job itself still waits
// at least that long (retry.After's semantics).
func TestPushbackIsFoundAndKeepsRetryAfter(t *testing.T) {
	t.Parallel()
	base := errors.New("webhook: 429 Too Many Requests")
	for _, tc := range []struct {
		name      string
		err       error
		wantAfter time.Duration
		wantOK    bool
		wantDelay time.Duration // Next(1) with no jitter
	}{
		{"plain error", base, 0, false, time.Second},
		{"retry-after alone", retry.After(base, 7*time.Second), 0, false, 7 * time.Second},
		{"pushback with retry-after", retry.Pushback(base, 7*time.Second), 7 * time.Second, true, 7 * time.Second},
		{"pushback without retry-after", retry.Pushback(base, 0), 0, true, time.Second},
		{"wrapped pushback", fmt.Errorf("job 1: %w", retry.Pushback(base, 3*time.Second)), 3 * time.Second, true, 3 * time.Second},
		{"retry-after capped by max", retry.Pushback(base, time.Hour), time.Hour, true, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after, ok := retry.IsPushback(tc.err)
			if after != tc.wantAfter || ok != tc.wantOK {
				t.Errorf("IsPushback = %v, %v; want %v, %v", after, ok, tc.wantAfter, tc.wantOK)
			}
			d := retry.Policy{Jitter: -1}.Next(1, tc.err, nil)
			if d.Verdict != retry.Retry || d.Delay != tc.wantDelay {
				t.Errorf("Next = %+v, want a retry after %v", d, tc.wantDelay)
			}
			if !errors.Is(tc.err, base) {
				t.Errorf("the handler's error is lost: %v", tc.err)
			}
		})
	}
	if retry.Pushback(nil, time.Second) != nil {
		t.Error("Pushback(nil) is not nil")
	}
}

// A pushback that is also permanent is permanent: the job is dead; the
// leak still pauses.
func TestPermanentPushbackIsDead(t *testing.T) {
	t.Parallel()
	err := retry.Permanent(retry.Pushback(errors.New("503"), time.Second))
	if d := (retry.Policy{}).Next(1, err, nil); d.Verdict != retry.Dead {
		t.Errorf("Next = %+v, want dead", d)
	}
	if _, ok := retry.IsPushback(err); !ok {
		t.Error("IsPushback lost the mark under Permanent")
	}
}
