package spillway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestParsePriority(t *testing.T) {
	for _, c := range []struct {
		in   string
		want spillway.Priority
	}{{"", spillway.Normal}, {"normal", spillway.Normal}, {" HIGH ", spillway.High}, {"Low", spillway.Low}} {
		if got, err := spillway.ParsePriority(c.in); err != nil || got != c.want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := spillway.ParsePriority("urgent"); err == nil {
		t.Error("ParsePriority(urgent): no error")
	}
	for _, p := range spillway.Priorities {
		if back, err := spillway.ParsePriority(p.String()); err != nil || back != p || !p.Valid() {
			t.Errorf("%v does not read back: %v, %v", p, back, err)
		}
	}
	if p := spillway.Priority(2); p.Valid() || p.String() != "Priority(2)" {
		t.Errorf("Priority(2): valid %v, %q", p.Valid(), p.String())
	}
}

func TestStateFinal(t *testing.T) {
	final := map[spillway.State]bool{
		spillway.StateAdmitted: false, spillway.StateQueued: false, spillway.StateRunning: false, spillway.StateRetrying: false,
		spillway.StateSucceeded: true, spillway.StateDead: true, spillway.StateExpired: true, spillway.StateCancelled: true,
	}
	for s, want := range final {
		if s.Final() != want {
			t.Errorf("%s.Final() = %v, want %v", s, s.Final(), want)
		}
	}
}

func TestValidateQueueName(t *testing.T) {
	for _, ok := range []string{"email", "EMAIL_2", "a", "Q_1-x", strings.Repeat("q", spillway.MaxQueueNameLen)} {
		if err := spillway.ValidateQueueName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, says := range map[string]string{
		"":                      "want 1 to 64",
		strings.Repeat("q", 65): "want 1 to 64",
		"a.b":                   "character '.' at byte 1",
		"a*":                    "character '*' at byte 1",
		"a>":                    "character '>' at byte 1",
		"a b":                   "character ' ' at byte 1",
		"xä":                    "character 'ä' at byte 1",
		"\xff":                  "character '�' at byte 0",
	} {
		err := spillway.ValidateQueueName(bad)
		if !errors.Is(err, spillway.ErrInvalidQueueName) || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want ErrInvalidQueueName saying %q", bad, err, says)
		}
	}
}

func TestIsToken(t *testing.T) {
	for s, want := range map[string]bool{"X-Api-Key": true, "Spillway-Cost": true, "a!#$%&'*+-.^_`|~z": true, "": false, "a b": false, "a:b": false, "é": false} {
		if spillway.IsToken(s) != want {
			t.Errorf("IsToken(%q) = %v", s, !want)
		}
	}
}

// A job's record leaves zero times out of its JSON, and reads back.
func TestJobJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := spillway.Job{ID: "0190f1c5-7b1e-7c4a-9f0e-3a1b2c3d4e5f", Queue: "email", State: spillway.StateQueued, EnqueuedAt: at, BacklogSeq: 7}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"0190f1c5-7b1e-7c4a-9f0e-3a1b2c3d4e5f","queue":"email","state":"queued","attempts":0,"enqueued_at":"2026-01-02T03:04:05Z","backlog_seq":7}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back spillway.Job
	if err := json.Unmarshal(b, &back); err != nil || back != j {
		t.Errorf("read back %+v, %v", back, err)
	}
}

// A client tells a problem from an answer by its media type, and what the
// problem asks by its type and retry_after_ms.
func Example() {
	body := []byte(`{"type":"https://spillway.dev/problems/queue-full","title":"Queue full","status":429,"retry_after_ms":1500}`)
	p, ok := spillway.ParseProblem(spillway.ProblemContentType, body)
	fmt.Println(ok, spillway.ProblemReason(p.Type), spillway.StatusOf(p.Type), spillway.RetryAfter(nil, p, time.Now()))
	// Output: true queue-full 429 1.5s
}
