package queue_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// A job's concurrency bounds travel in its message and read back the same;
// a malformed stamp makes the job invalid, naming the header and the part.
func TestConcurrencyStamp(t *testing.T) {
	t.Parallel()
	j := queuetest.NewJob(t, "q", "tenant-a")
	j.Concurrency = []queue.ConcurrencyKey{{Name: "per-tenant", Max: 2, Token: queue.KeyToken("tenant-a")}, {Name: "all", Max: 50, Token: queue.KeyToken("")}}
	m, err := queue.MessageOf(j, queue.Ready)
	if err != nil {
		t.Fatal(err)
	}
	got, err := queue.ParseJob(m.Header, m.Data)
	if err != nil || !slices.Equal(got.Concurrency, j.Concurrency) || got.Header.Get(queue.HeaderConcurrencyKey) != "" {
		t.Fatalf("read back %+v, %v; want %+v and no such header among the job's own", got.Concurrency, err, j.Concurrency)
	}
	tok := queue.KeyToken("x")
	for _, c := range []struct{ value, want string }{
		{"per-tenant:2", "want NAME:MAX:KEYTOKEN"},
		{"a.b:2:" + tok, "want NAME:MAX:KEYTOKEN"},
		{"a:0:" + tok, `max "0": want an integer from 1 to 10000`},
		{"a:many:" + tok, `max "many": want an integer from 1 to 10000`},
		{"a:2:tenant-a", `key token "tenant-a": want 26 characters of a-z2-7`},
	} {
		m.Header.Set(queue.HeaderConcurrencyKey, c.value)
		_, err := queue.ParseJob(m.Header, m.Data)
		if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), queue.HeaderConcurrencyKey) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an invalid job naming %s and %q", c.value, err, queue.HeaderConcurrencyKey, c.want)
		}
	}
}
