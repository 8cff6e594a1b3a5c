package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// WithDebounce and WithDebounceKey reach the admitter on both doors: a
// newer job of the same debounce key supersedes the waiting one, whose
// status says so; another key's job is left alone. Bad values fail
// before anything is sent.
func TestDebounce(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for door, c := range doors(t, a) {
		submit := func(key string) *client.Answer {
			t.Helper()
			ans, err := c.Submit(t.Context(), "work", nil, client.WithDebounce(time.Hour), client.WithDebounceKey(door+key))
			if err != nil || ans.Verdict != spillway.Queued || ans.NotBefore.Before(time.Now().Add(59*time.Minute)) {
				t.Fatalf("%s: a job debounced an hour: %+v, %v; want queued an hour out", door, ans, err)
			}
			return ans
		}
		first, other, second := submit("-a"), submit("-b"), submit("-a")
		job, err := c.Status(t.Context(), first.ID)
		if err != nil || job.State != spillway.StateSuperseded || job.SupersededBy != second.ID || !job.State.Final() {
			t.Errorf("%s: the first job: %+v, %v; want superseded by %s", door, job, err, second.ID)
		}
		for _, id := range []string{other.ID, second.ID} {
			// A queued job's first record is written just after its answer.
			deadline := time.Now().Add(5 * time.Second)
			job, err := c.Status(t.Context(), id)
			for errors.Is(err, client.ErrNotFound) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				job, err = c.Status(t.Context(), id)
			}
			if err != nil || job.State != spillway.StateQueued {
				t.Errorf("%s: job %s: %+v, %v; want queued", door, id, job, err)
			}
		}
		if _, err := c.Cancel(t.Context(), first.ID); !errors.Is(err, client.ErrConflict) {
			t.Errorf("%s: cancelling a superseded job: %v, want a conflict", door, err)
		}
		for _, opt := range []client.SubmitOption{client.WithDebounce(0), client.WithDebounce(-time.Second), client.WithDebounceKey("")} {
			if _, err := c.Submit(t.Context(), "work", nil, opt); !errors.Is(err, client.ErrInvalidOption) {
				t.Errorf("%s: a bad debounce option: %v, want ErrInvalidOption", door, err)
			}
		}
		// A batch's jobs of one key supersede each other in the batch's
		// order: the last one waits.
		opts := []client.SubmitOption{client.WithDebounce(time.Hour), client.WithDebounceKey(door + "-batch")}
		res, err := c.SubmitBatch(t.Context(), "work", []client.BatchJob{{Options: opts}, {Options: opts}, {Options: opts}})
		if err != nil || len(res) != 3 {
			t.Fatalf("%s: a batch of debounced jobs: %v, %v", door, res, err)
		}
		for i, r := range res[:2] {
			if r.Err != nil {
				t.Fatalf("%s: batch job %d: %v", door, i, r.Err)
			}
			job, err := c.Status(t.Context(), r.Answer.ID)
			if err != nil || job.State != spillway.StateSuperseded || job.SupersededBy != res[i+1].Answer.ID {
				t.Errorf("%s: batch job %d: %+v, %v; want superseded by the next", door, i, job, err)
			}
		}
		var pe *client.ProblemError
		_, err = c.Submit(t.Context(), "work", nil, client.WithDebounce(25*time.Hour))
		if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &pe) || (door == "http" && pe.Field != spillway.HeaderDebounce) ||
			!strings.Contains(pe.Detail, spillway.HeaderDebounce) || !strings.Contains(pe.Detail, "max_delay") {
			t.Errorf("%s: a debounce beyond max_delay: %v, want a bad request naming %s", door, err, spillway.HeaderDebounce)
		}
	}
}
