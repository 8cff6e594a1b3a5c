package config

import (
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// backlog.pushback: queue (the default) or key, into queue.Config.Pushback;
// anything else is refused, naming the field and the values it takes.
func TestBacklogPushback(t *testing.T) {
	t.Parallel()
	if got := mustLoad(t, minimal).Queues[0].Backlog.Pushback; got != "" {
		t.Errorf("no pushback: %q, want \"\" (the queue's leak pauses)", got)
	}
	for _, v := range []queue.PushbackScope{queue.PushbackQueue, queue.PushbackKey} {
		src := strings.Replace(minimal, "backlog: {leak_rate: 1/s}", "backlog: {leak_rate: 1/s, pushback: "+string(v)+"}", 1)
		if got := mustLoad(t, src).Queues[0].Backlog.Pushback; got != v {
			t.Errorf("pushback: %s read as %q", v, got)
		}
	}
	src := strings.Replace(minimal, "backlog: {leak_rate: 1/s}", "backlog: {leak_rate: 1/s, pushback: keys}", 1)
	got := problems(t, src)
	if len(got) != 1 || !strings.Contains(got[0], "queues[0].backlog.pushback: expected one of queue, key") {
		t.Errorf("pushback: keys:\n got %s\nwant one problem naming queues[0].backlog.pushback and its values", strings.Join(got, "\n     "))
	}
	c := queue.Config{Name: "q", LeakRate: mustLoad(t, minimal).Queues[0].Backlog.LeakRate, Pushback: "job"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "pushback") {
		t.Errorf("Validate with Pushback %q: %v, want the field named", c.Pushback, err)
	}
}
