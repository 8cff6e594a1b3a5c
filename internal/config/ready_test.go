package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// ready.capacity bounds a queue's READY stream: default
// queue.DefaultReadyCapacity, else an integer ≥ 1, reported by line and
// field when it is not.
func TestReadyCapacity(t *testing.T) {
	t.Parallel()
	if q := mustLoad(t, minimal).Queues[0]; q.Backlog.ReadyCapacity != queue.DefaultReadyCapacity {
		t.Errorf("default ready capacity %d, want %d", q.Backlog.ReadyCapacity, queue.DefaultReadyCapacity)
	}
	if q := mustLoad(t, minimal+"    ready: {capacity: 250}\n").Queues[0]; q.Backlog.ReadyCapacity != 250 {
		t.Errorf("ready capacity %d, want 250", q.Backlog.ReadyCapacity)
	}
	for _, c := range []struct{ name, src, want string }{
		{"zero", minimal + "    ready: {capacity: 0}\n", `spillway.yaml:5: queues[0].ready.capacity: expected an integer ≥ 1, got "0"`},
		{"not a number", minimal + "    ready: {capacity: lots}\n", `spillway.yaml:5: queues[0].ready.capacity: expected an integer ≥ 1, got "lots"`},
		{"typo", minimal + "    ready: {capacty: 5}\n", `spillway.yaml:5: queues[0].ready.capacty: unknown field (did you mean capacity?)`},
	} {
		got := problems(t, c.src)
		if !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, strings.Join(got, "\n     "), c.want)
		}
	}
}
