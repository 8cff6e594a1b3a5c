package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// backlog.max_delay bounds scheduled jobs: default queue.DefaultMaxDelay,
// else a duration ≥ 0, reported by line and field when it is not.
func TestMaxDelay(t *testing.T) {
	t.Parallel()
	if q := mustLoad(t, minimal).Queues[0]; q.Backlog.MaxDelay != queue.DefaultMaxDelay {
		t.Errorf("default max_delay %v, want %v", q.Backlog.MaxDelay, queue.DefaultMaxDelay)
	}
	src := strings.Replace(minimal, "{leak_rate: 1/s}", "{leak_rate: 1/s, max_delay: 90m}", 1)
	if q := mustLoad(t, src).Queues[0]; q.Backlog.MaxDelay != 90*time.Minute {
		t.Errorf("max_delay %v, want 1h30m", q.Backlog.MaxDelay)
	}
	for _, c := range []struct{ name, value, want string }{
		{"negative", "-1s", `spillway.yaml:4: queues[0].backlog.max_delay: expected a duration ≥ 0, got "-1s"`},
		{"not a duration", "a day", `spillway.yaml:4: queues[0].backlog.max_delay: expected a Go duration such as "1s" or "5m", got "a day"`},
	} {
		got := problems(t, strings.Replace(minimal, "{leak_rate: 1/s}", "{leak_rate: 1/s, max_delay: "+c.value+"}", 1))
		if !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, strings.Join(got, "\n     "), c.want)
		}
	}
}
