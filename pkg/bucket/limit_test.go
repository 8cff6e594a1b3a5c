package bucket_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want bucket.Rate
	}{
		{"10/s", bucket.Rate{Count: 10, Per: time.Second}},
		{"600/m", bucket.Rate{Count: 600, Per: time.Minute}},
		{"1/h", bucket.Rate{Count: 1, Per: time.Hour}},
		{"10r/s", bucket.Rate{Count: 10, Per: time.Second}},
		{"5/10s", bucket.Rate{Count: 5, Per: 10 * time.Second}},
		{"3/100ms", bucket.Rate{Count: 3, Per: 100 * time.Millisecond}},
		{"2/ms", bucket.Rate{Count: 2, Per: time.Millisecond}},
		{" 7/s ", bucket.Rate{Count: 7, Per: time.Second}},
	} {
		got, err := bucket.ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// Every bad limit gets a one-line error naming the field and the reason.
func TestSpecErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec  bucket.Spec
		field string
		says  string
	}{
		{bucket.Spec{Algorithm: "leaky"}, "algorithm", "want one of leaky_bucket"},
		{bucket.Spec{}, "rate", "needs a rate"},
		{bucket.Spec{Rate: "10"}, "rate", "COUNT/UNIT"},
		{bucket.Spec{Rate: "ten/s"}, "rate", "positive integer"},
		{bucket.Spec{Rate: "0/s"}, "rate", "positive integer"},
		{bucket.Spec{Rate: "-1/s"}, "rate", "positive integer"},
		{bucket.Spec{Rate: "10/x"}, "rate", "unit \"x\""},
		{bucket.Spec{Rate: "10/-1s"}, "rate", "positive Go duration"},
		{bucket.Spec{Rate: "10/s", Burst: -1}, "burst", "≥ 0"},
		{bucket.Spec{Rate: "10/s", Burst: 5, Delay: 6}, "delay", "between 0 and burst"},
		{bucket.Spec{Rate: "10/s", Burst: 5, Delay: -1}, "delay", "between 0 and burst"},
		{bucket.Spec{Rate: "10/s", Burst: 5, Delay: 2, NoDelay: true}, "delay", "not both"},
		{bucket.Spec{Rate: "1/h", Burst: 1 << 40}, "burst", "too large"},
		{bucket.Spec{Rate: "10/s", Window: "1s"}, "window", "not limit and window"},
		{bucket.Spec{Algorithm: "token_bucket", Rate: "10/s"}, "burst", "capacity must be ≥ 1"},
		{bucket.Spec{Algorithm: "token_bucket", Rate: "10/s", Burst: 5, Delay: 1}, "delay", "no delay"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 10}, "window", "needs a window"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 10, Window: "soon"}, "window", "Go duration"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 10, Window: "-1s"}, "window", "positive"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 10, Window: "300h"}, "window", "at most 240h"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 0, Window: "1s"}, "limit", "between 1 and"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 1 << 40, Window: "1s"}, "limit", "between 1 and"},
		{bucket.Spec{Algorithm: "sliding_window", Rate: "1/s", Limit: 1, Window: "1s"}, "rate", "not rate"},
		{bucket.Spec{Algorithm: "sliding_window", Limit: 1e7, Window: "24h"}, "limit", "below 2^53"},
		{bucket.Spec{Algorithm: "sliding_log", Limit: 2e6, Window: "1s"}, "limit", "use sliding_window"},
	} {
		_, err := c.spec.Build()
		var le *bucket.LimitError
		if !errors.As(err, &le) || !errors.Is(err, bucket.ErrInvalidLimit) {
			t.Errorf("%+v: error %v, want a *LimitError", c.spec, err)
			continue
		}
		if le.Field != c.field || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %q (field %s), want one line on field %s saying %q", c.spec, err, le.Field, c.field, c.says)
		}
	}
}

func TestLimitAccessorsAndPolicy(t *testing.T) {
	t.Parallel()
	l, err := bucket.Spec{Rate: "10/s", Burst: 20, NoDelay: true}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if l.Delay() != 20 || l.Quota() != 21 || l.PolicyWindow() != 2100*time.Millisecond {
		t.Fatalf("%s: delay %d quota %d window %v", l, l.Delay(), l.Quota(), l.PolicyWindow())
	}
	if a, p := l.Scaled(); a != 1 || p != int64(100*time.Millisecond) {
		t.Fatalf("10/s scaled to %d per %d ns, want 1 per 1e8", a, p)
	}
	w, _ := bucket.NewSlidingWindow(100, time.Minute)
	if w.Quota() != 100 || w.PolicyWindow() != time.Minute || w.String() != "sliding_window limit=100 window=1m0s" {
		t.Fatalf("%s: quota %d window %v", w, w.Quota(), w.PolicyWindow())
	}
}

// FuzzSpec: no spec panics; every spec either builds a valid limit or
// reports a *LimitError.
func FuzzSpec(f *testing.F) {
	f.Add("leaky_bucket", "10/s", int64(20), int64(5), false, int64(0), "")
	f.Add("sliding_window", "", int64(0), int64(0), false, int64(100), "60s")
	f.Add("token_bucket", "1r/h", int64(1), int64(0), true, int64(0), "")
	f.Fuzz(func(t *testing.T, alg, rate string, burst, delay int64, nodelay bool, limit int64, window string) {
		s := bucket.Spec{Algorithm: alg, Rate: rate, Burst: burst, Delay: delay, NoDelay: nodelay, Limit: limit, Window: window}
		l, err := s.Build()
		if err != nil {
			var le *bucket.LimitError
			if !errors.As(err, &le) || le.Field == "" {
				t.Fatalf("%+v: error %v is not a *LimitError naming a field", s, err)
			}
			return
		}
		if !l.Valid() || l.Quota() < 1 || l.PolicyWindow() <= 0 {
			t.Fatalf("%+v built %s with quota %d window %v", s, l, l.Quota(), l.PolicyWindow())
		}
	})
}
