package queue_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/spillway-dev/spillway/pkg/queue"
)

func TestNewJobIDs(t *testing.T) {
	before, err := queue.NewJobID()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := queue.NewJobIDs(queue.MaxJobIDs)
	if err != nil {
		t.Fatal(err)
	}
	after, err := queue.NewJobID()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != queue.MaxJobIDs {
		t.Fatalf("%d ids, want %d", len(ids), queue.MaxJobIDs)
	}
	if !slices.IsSorted(ids) || ids[0] <= before || ids[len(ids)-1] >= after {
		t.Errorf("ids not in order between %s and %s: first %s, last %s", before, after, ids[0], ids[len(ids)-1])
	}
	first := uuid.MustParse(ids[0])
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || u.String() != id || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %d %q: not a lower-case UUIDv7 (%v)", i, id, err)
		}
		if low := int(u[14]&0x03)<<8 | int(u[15]); low != i {
			t.Errorf("id %d %s: last 10 bits %d", i, id, low)
		}
		u[14], u[15] = first[14], first[15]
		if u != first {
			t.Errorf("id %d %s: differs from id 0 %s beyond its last 10 bits", i, id, ids[0])
		}
	}
	other, err := queue.NewJobIDs(2)
	if err != nil {
		t.Fatal(err)
	}
	if other[0] <= after {
		t.Errorf("a later call's id %s is not after %s", other[0], after)
	}
	for _, n := range []int{-1, queue.MaxJobIDs + 1} {
		if _, err := queue.NewJobIDs(n); err == nil {
			t.Errorf("NewJobIDs(%d): no error", n)
		}
	}
	if ids, err := queue.NewJobIDs(0); err != nil || len(ids) != 0 {
		t.Errorf("NewJobIDs(0) = %v, %v; want none", ids, err)
	}
}
