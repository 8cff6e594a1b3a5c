package retry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/retry"
)

// ValidateGiven refuses zero fields (a file's loader has filled the
// defaults itself, so zero was written) and reports every problem, each a
// *retry.FieldError naming the field and what it must be.
func TestValidateGivenReportsEveryField(t *testing.T) {
	t.Parallel()
	err := retry.Policy{MaxAttempts: 0, Initial: 10 * time.Minute, Max: 5 * time.Minute, Jitter: 1.5}.ValidateGiven()
	var got []retry.FieldError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *retry.FieldError
		if !errors.As(e, &fe) || !errors.Is(e, retry.ErrInvalidPolicy) {
			t.Fatalf("%v: not a *retry.FieldError", e)
		}
		got = append(got, *fe)
	}
	want := []retry.FieldError{
		{Field: "max_attempts", Value: "0", Want: "an integer ≥ 1"},
		{Field: "initial", Value: "10m0s", Want: "at most max", Other: "max", OtherValue: "5m0s"},
		{Field: "jitter", Value: "1.5", Want: "a number from 0 to 1"},
	}
	if len(got) != len(want) {
		t.Fatalf("problems %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if err := (retry.Policy{Jitter: -1}).Validate(); err != nil {
		t.Errorf("no jitter: %v", err)
	}
}
