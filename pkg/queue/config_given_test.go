package queue_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// ValidateGiven refuses zero fields (a file's loader has filled the
// defaults itself, so zero was written) and reports every problem, each a
// *queue.FieldError naming the field and what it must be.
func TestValidateGivenReportsEveryField(t *testing.T) {
	t.Parallel()
	cfg := queue.Config{Name: "q", Capacity: 0, PerKeyCapacity: 3, ReadyCapacity: 0, Replicas: 6, DuplicateWindow: 0, MaxAge: -time.Second}
	err := cfg.ValidateGiven()
	type problem struct{ field, want string }
	var got []problem
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *queue.FieldError
		if !errors.As(e, &fe) || !errors.Is(e, queue.ErrInvalidConfig) {
			t.Fatalf("%v: not a *queue.FieldError", e)
		}
		got = append(got, problem{fe.Field, fe.Want})
	}
	want := []problem{{"capacity", "an integer ≥ 1"}, {"max_age", "a duration ≥ 0"}, {"duplicate_window", "a positive duration"},
		{"ready_capacity", "an integer ≥ 1"}, {"replicas", "an integer from 1 to 5"}}
	if len(got) != len(want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d: %v, want %v", i, got[i], want[i])
		}
	}
	var fe *queue.FieldError
	err = queue.Config{Name: "q", Capacity: 5, PerKeyCapacity: 6, ReadyCapacity: 1, Replicas: 1, DuplicateWindow: time.Second}.ValidateGiven()
	if !errors.As(err, &fe) || fe.Field != "per_key_capacity" || fe.Other != "capacity" || fe.OtherValue != "5" || fe.Value != "6" {
		t.Errorf("per_key_capacity above capacity: %#v", fe)
	}
	if err := (queue.Config{Name: "q"}).Validate(); err != nil {
		t.Errorf("the zero Config with a name: %v", err)
	}
}
