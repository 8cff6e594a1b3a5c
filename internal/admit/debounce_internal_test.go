package admit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// nobody is a Superseder that is never asked (register does not call it).
type nobody struct{}

func (nobody) Supersede(context.Context, Superseded) (bool, error) { return false, nil }

// TestDebounceRegister: a group's entry names the job stored last (the
// highest backlog sequence), whatever order the admitters register
// their jobs in; each register says which job it supersedes.
func TestDebounceRegister(t *testing.T) {
	t.Parallel()
	js := queuetest.Start(t).JetStream(t)
	d, err := OpenDebounce(t.Context(), js, time.Hour, 1, nobody{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	due := now.Add(time.Second)
	e := func(id string, seq uint64) debounceEntry { return debounceEntry{ID: id, Seq: seq, NotBefore: due} }
	for _, step := range []struct {
		what      string
		job       debounceEntry
		now       time.Time
		old, by   string // the job superseded ("": none) and the one superseding it
		newestNow string // the group's entry afterwards
	}{
		{"the first job of a group", e("a", 10), now, "", "a", "a"},
		{"a job stored after it", e("b", 12), now, "a", "b", "b"},
		{"the same job again (a retry)", e("b", 12), now, "", "b", "b"},
		{"a job stored before the newest, registered after it", e("c", 11), now, "c", "b", "b"},
		{"a job stored after it", e("d", 13), now, "b", "d", "d"},
		{"an entry due already with a higher sequence (the backlog was made again)", e("x", 2), due.Add(time.Millisecond), "d", "x", "x"},
	} {
		old, by, err := d.register(t.Context(), "q.group", step.job, step.now)
		if err != nil || old.ID != step.old || by.ID != step.by {
			t.Errorf("%s: superseded %q by %q (%v), want %q by %q", step.what, old.ID, by.ID, err, step.old, step.by)
		}
		cur, err := d.kv.Get(t.Context(), "q.group")
		if err != nil || !strings.Contains(string(cur.Value()), `"id":"`+step.newestNow+`"`) {
			t.Errorf("%s: entry %s (%v), want job %s", step.what, cur.Value(), err, step.newestNow)
		}
	}
}
