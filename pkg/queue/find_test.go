package queue_test

import (
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A READY job is found by its id alone, under the subject its id names,
// and a job READY does not hold is not found, without an error.
func TestFindReady(t *testing.T) {
	ctx, b := queuetest.StartQueue(t, queuetest.QueueConfig("email"))
	j := queuetest.NewJob(t, "email", "tenant.*.>")
	j.NotBefore = time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := b.Pub.Publish(ctx, queue.Ready, j); err != nil {
		t.Fatal(err)
	}
	m, err := queue.FindReady(ctx, b.JS, "email", j.ID)
	if err != nil || m == nil {
		t.Fatalf("FindReady(%s) = %v, %v; want the job", j.ID, m, err)
	}
	if m.Subject != queue.ReadySubject("email", j.ID) || m.Subject != "spillway.ready.email."+j.ID {
		t.Errorf("subject %s, want spillway.ready.email.%s", m.Subject, j.ID)
	}
	got, err := queue.ParseJob(m.Header, m.Data)
	if err != nil || got.ID != j.ID || got.Key != j.Key || !got.NotBefore.Equal(j.NotBefore) || string(got.Payload) != string(j.Payload) {
		t.Errorf("found %+v (%v), want job %s of key %q", got, err, j.ID, j.Key)
	}
	other := queuetest.NewJob(t, "email", "k")
	for _, id := range []string{other.ID, "not a token", "a.b", ""} {
		if m, err := queue.FindReady(ctx, b.JS, "email", id); m != nil || err != nil {
			t.Errorf("FindReady(%q) = %v, %v; want nothing", id, m, err)
		}
	}
	// A job whose id cannot be a subject token is refused in READY.
	bad := queuetest.NewJob(t, "email", "k")
	bad.ID = "x.y"
	if _, err := b.Pub.Publish(ctx, queue.Ready, bad); err == nil {
		t.Error("a READY job with id x.y was stored")
	}
	_ = spillway.Normal
}
