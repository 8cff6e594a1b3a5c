package queue

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A job moved to READY's tail reads as the job it was: the tries it spent
// and its not-before, and the move count stays Spillway's, out of the
// headers a handler is given.
func TestTailMovedJobParses(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := Job{ID: "01a22177-bb54-7d72-9286-ee7df01d5e0d", Queue: "q", Key: "k", Cost: 1, EnqueuedAt: now, Header: nats.Header{"Traceparent": {"00-abc-def-01"}}}
	m, err := j.message(Ready)
	if err != nil {
		t.Fatal(err)
	}
	src := Source{Queue: "q", Subject: m.Subject, Stream: StreamName("q", Ready), Seq: 3, Header: m.Header, Data: m.Data}
	mv := TailMove(src, 2, now.Add(time.Second), 1)
	c, err := mv.message()
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != m.Subject {
		t.Errorf("copy's subject %s, want the job's own, %s", c.Subject, m.Subject)
	}
	got, err := ParseJob(c.Header, c.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != j.ID || got.Attempt != 2 || !got.NotBefore.Equal(now.Add(time.Second)) {
		t.Errorf("moved job: id %s, attempt %d, not-before %v; want %s, 2, %v", got.ID, got.Attempt, got.NotBefore, j.ID, now.Add(time.Second))
	}
	if _, ok := got.Header[HeaderKeyMoves]; ok {
		t.Errorf("the job's headers hold %s: %v", HeaderKeyMoves, got.Header)
	}
	if got.Header.Get("Traceparent") != "00-abc-def-01" {
		t.Errorf("the job's own header lost: %v", got.Header)
	}
	if KeyMoves(c.Header) != 1 || c.Header.Get(spillway.HeaderJobID) != j.ID {
		t.Errorf("copy's headers %v", c.Header)
	}
}
