package retry_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillway-dev/spillway/pkg/retry"
)

// A handler that keeps failing: retried on the doubling schedule, then dead.
func ExamplePolicy_Next() {
	p := retry.Policy{MaxAttempts: 5, Initial: time.Second, Max: 5 * time.Second, Jitter: -1}
	err := errors.New("webhook answered 500")
	for attempt := 1; ; attempt++ {
		d := p.Next(attempt, err, nil)
		if d.Verdict == retry.Dead {
			fmt.Printf("attempt %d failed: dead, %s\n", attempt, d.Reason)
			return
		}
		fmt.Printf("attempt %d failed: retry in %v\n", attempt, d.Delay)
	}
	// Output:
	// attempt 1 failed: retry in 1s
	// attempt 2 failed: retry in 2s
	// attempt 3 failed: retry in 4s
	// attempt 4 failed: retry in 5s
	// attempt 5 failed: dead, attempts exhausted (5 of 5)
}

// A 4xx that retrying cannot fix goes to the dead letters at once.
func ExamplePermanent() {
	err := retry.Permanent(errors.New("webhook answered 400: bad payload"))
	fmt.Println(retry.Policy{}.Next(1, err, nil).Verdict)
	// Output: dead
}
