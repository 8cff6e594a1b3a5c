package retry_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/retry"
)

func TestDelayIsExactAndCapped(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: time.Second, Max: 5 * time.Minute}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i, w := range want {
		if got := p.Delay(i + 1); got != w*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
	// Huge attempts saturate at Max without overflowing.
	for _, n := range []int{40, 62, 63, 64, 1000, 1 << 30} {
		if got := p.Delay(n); got != 5*time.Minute {
			t.Errorf("Delay(%d) = %v, want the cap", n, got)
		}
	}
	if got := (retry.Policy{Initial: 3 * time.Millisecond, Max: time.Hour}).Delay(0); got != 3*time.Millisecond {
		t.Errorf("Delay(0) = %v, want Initial", got)
	}
	// The zero policy is DESIGN's default: 1s doubling to 5m.
	if got := (retry.Policy{}).Delay(4); got != 8*time.Second {
		t.Errorf("zero policy Delay(4) = %v, want 8s", got)
	}
}

// A poison job is tried exactly MaxAttempts times on the schedule, then dead.
func TestNextWalksTheScheduleThenGivesUp(t *testing.T) {
	t.Parallel()
	p := retry.Policy{MaxAttempts: 4, Initial: 100 * time.Millisecond, Max: time.Second, Jitter: -1}
	fail := errors.New("downstream 500")
	var delays []time.Duration
	attempt := 1
	for ; ; attempt++ {
		d := p.Next(attempt, fail, nil)
		if d.Verdict == retry.Dead {
			if d.Reason != "attempts exhausted (4 of 4)" {
				t.Errorf("reason %q", d.Reason)
			}
			break
		}
		delays = append(delays, d.Delay)
	}
	if attempt != 4 || fmt.Sprint(delays) != "[100ms 200ms 400ms]" {
		t.Fatalf("dead after attempt %d with delays %v, want after 4 with [100ms 200ms 400ms]", attempt, delays)
	}
	if got := p.Attempts(); got != 4 {
		t.Errorf("Attempts() = %d, want 4", got)
	}
	if got := (retry.Policy{}).Attempts(); got != retry.DefaultMaxAttempts {
		t.Errorf("zero policy: Attempts() = %d, want the default %d", got, retry.DefaultMaxAttempts)
	}
}

func TestJitterStaysWithinItsFraction(t *testing.T) {
	t.Parallel()
	p := retry.Policy{MaxAttempts: 100, Initial: 10 * time.Second, Max: time.Hour, Jitter: 0.2}
	rng := rand.New(rand.NewPCG(1, 2))
	lowest, highest := time.Hour, time.Duration(0)
	for range 10_000 {
		d := p.Next(1, errors.New("x"), rng).Delay
		lowest, highest = min(lowest, d), max(highest, d)
	}
	if lowest < 8*time.Second || highest > 10*time.Second || highest-lowest < 1900*time.Millisecond {
		t.Fatalf("jittered delays span [%v, %v], want within and across [8s, 10s]", lowest, highest)
	}
	// The same seed gives the same delays: jitter is reproducible in tests.
	a := p.Next(3, errors.New("x"), rand.New(rand.NewPCG(7, 7))).Delay
	b := p.Next(3, errors.New("x"), rand.New(rand.NewPCG(7, 7))).Delay
	if a != b {
		t.Fatalf("same seed, delays %v and %v", a, b)
	}
}

func TestPermanentAndAfter(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: time.Second, Max: time.Minute, Jitter: -1}
	base := errors.New("HTTP 404")
	perm := fmt.Errorf("webhook: %w", retry.Permanent(base))
	if d := p.Next(1, perm, nil); d.Verdict != retry.Dead || d.Reason != "permanent error" {
		t.Fatalf("permanent error on attempt 1: %+v, want dead", d)
	}
	if !errors.Is(perm, base) || !retry.IsPermanent(perm) || retry.IsPermanent(base) {
		t.Fatal("Permanent must wrap and be detectable through wrapping")
	}
	slow := retry.After(errors.New("HTTP 429"), 30*time.Second)
	if d := p.Next(1, slow, nil); d.Verdict != retry.Retry || d.Delay != 30*time.Second {
		t.Fatalf("Retry-After 30s: %+v, want a 30s delay", d)
	}
	if d := p.Next(1, retry.After(errors.New("HTTP 503"), time.Hour), nil); d.Delay != time.Minute {
		t.Fatalf("Retry-After 1h: %v, want the policy's max 1m", d.Delay)
	}
	if d := p.Next(3, retry.After(errors.New("HTTP 429"), time.Second), nil); d.Delay != 4*time.Second {
		t.Fatalf("a Retry-After shorter than the schedule: %v, want the schedule's 4s", d.Delay)
	}
	if retry.Permanent(nil) != nil || retry.After(nil, time.Second) != nil {
		t.Fatal("wrapping nil must give nil")
	}
	if _, ok := retry.RetryAfter(base); ok {
		t.Fatal("RetryAfter of an unmarked error")
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    retry.Policy
		says string
	}{
		{retry.Policy{MaxAttempts: -1}, "max_attempts -1"},
		{retry.Policy{Initial: -time.Second}, "initial -1s"},
		{retry.Policy{Max: -time.Second}, "max -1s"},
		{retry.Policy{Jitter: 1.5}, "jitter 1.5"},
		{retry.Policy{Initial: time.Hour, Max: time.Minute}, "initial 1h0m0s is longer than max 1m0s"},
		{retry.Policy{Initial: 10 * time.Minute}, "longer than max 5m0s"},
	} {
		err := c.p.Validate()
		if !errors.Is(err, retry.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error saying %q", c.p, err, c.says)
		}
	}
	if err := (retry.Policy{}).Validate(); err != nil {
		t.Fatalf("the zero policy: %v", err)
	}
}
