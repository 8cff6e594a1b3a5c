package queue_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/spillway-dev/spillway/pkg/queue"
)

func TestNewJobIDs(t *testing.T) {
	before, err := queue.NewJobID("email")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := queue.NewJobIDs("email", queue.MaxJobIDs)
	if err != nil {
		t.Fatal(err)
	}
	after, err := queue.NewJobID("email")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != queue.MaxJobIDs {
		t.Fatalf("%d ids, want %d", len(ids), queue.MaxJobIDs)
	}
	if !slices.IsSorted(ids) || ids[0] <= before || ids[len(ids)-1] >= after {
		t.Errorf("ids not in order between %s and %s: first %s, last %s", before, after, ids[0], ids[len(ids)-1])
	}
	groups := map[int]uuid.UUID{} // group → the first 10 bytes its ids share
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || u.String() != id || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %d %q: not a lower-case UUIDv7 (%v)", i, id, err)
		}
		if slot := int(u[10] >> 2); slot != i%queue.JobIDsPerGroup {
			t.Errorf("id %d %s: place %d in its group, want %d", i, id, slot, i%queue.JobIDsPerGroup)
		}
		clear(u[10:])
		g := i / queue.JobIDsPerGroup
		if first, ok := groups[g]; !ok {
			groups[g] = u
		} else if u != first {
			t.Errorf("id %d %s: not of its group's (%s)", i, id, first)
		}
	}
	if len(groups) != queue.MaxJobIDs/queue.JobIDsPerGroup {
		t.Errorf("%d groups, want %d", len(groups), queue.MaxJobIDs/queue.JobIDsPerGroup)
	}
	other, err := queue.NewJobIDs("email", 2)
	if err != nil {
		t.Fatal(err)
	}
	if other[0] <= after {
		t.Errorf("a later call's id %s is not after %s", other[0], after)
	}
	for _, n := range []int{-1, queue.MaxJobIDs + 1} {
		if _, err := queue.NewJobIDs("email", n); err == nil {
			t.Errorf("NewJobIDs(%d): no error", n)
		}
	}
	if ids, err := queue.NewJobIDs("email", 0); err != nil || len(ids) != 0 {
		t.Errorf("NewJobIDs(0) = %v, %v; want none", ids, err)
	}
}

// The ids of a batch are not derivable from one another: beside its place
// in its group, each has 42 random bits of its own. Two ids of one batch
// never share their first 118 bits (ids that differed in their last 10
// bits only were the next and previous jobs of anyone who knew one), and
// the bits that are each id's own are not a sequence.
func TestNewJobIDsIndependent(t *testing.T) {
	ids, err := queue.NewJobIDs("email", 100)
	if err != nil {
		t.Fatal(err)
	}
	heads := map[[15]byte]string{}
	own := map[uint64]string{}
	for _, id := range ids {
		u := uuid.MustParse(id)
		var head [15]byte // the first 118 bits
		copy(head[:], u[:15])
		head[14] &^= 0x03
		if other, dup := heads[head]; dup {
			t.Errorf("ids %s and %s share their first 118 bits", other, id)
		}
		heads[head] = id
		r := uint64(u[10]&0x03)<<40 | uint64(u[11])<<32 | uint64(u[12])<<24 | uint64(u[13])<<16 | uint64(u[14])<<8 | uint64(u[15])
		if other, dup := own[r]; dup {
			t.Errorf("ids %s and %s have the same random bits", other, id)
		}
		own[r] = id
	}
	// Consecutive ids' own bits are not one after the other: a sequence
	// would make the next id the last one plus one.
	seq := 0
	for i := 1; i < len(ids); i++ {
		a, b := uuid.MustParse(ids[i-1]), uuid.MustParse(ids[i])
		if a[15]+1 == b[15] && a[14] == b[14] {
			seq++
		}
	}
	if seq > 5 {
		t.Errorf("%d of %d consecutive ids differ by one in their last bits: a sequence", seq, len(ids)-1)
	}
}

// A job id carries its queue's tag (14 bits of the SHA-256 of the queue's
// name), whichever way it was made, and stays a valid UUIDv7: the tag is
// in rand_b, under the variant bits and inside a group's shared bytes, so
// the ids of one queue made one after the other stay unique and in order.
func TestJobIDQueueTag(t *testing.T) {
	tags := map[uint16]string{}
	for _, q := range []string{"email", "reports", "q", "a-much-longer-queue-name_0123456789"} {
		want := queue.QueueTag(q)
		if want >= 1<<queue.QueueTagBits {
			t.Fatalf("QueueTag(%q) = %#x: more than %d bits", q, want, queue.QueueTagBits)
		}
		if other, ok := tags[want]; ok {
			t.Fatalf("queues %q and %q share tag %#x", other, q, want) // these four do not
		}
		tags[want] = q
		var ids []string
		for range 50 {
			id, err := queue.NewJobID(q)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		batch, err := queue.NewJobIDs(q, 2*queue.JobIDsPerGroup+1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, batch...)
		last, err := queue.NewJobID(q)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, last)
		seen := map[string]bool{}
		for i, id := range ids {
			u, err := uuid.Parse(id)
			if err != nil || u.String() != id || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
				t.Fatalf("%s id %d %q: not a lower-case UUIDv7 (%v)", q, i, id, err)
			}
			if got, ok := queue.JobIDQueueTag(id); !ok || got != want {
				t.Errorf("%s id %s: tag %#x, %v; want %#x", q, id, got, ok, want)
			}
			if seen[id] {
				t.Errorf("%s id %s made twice", q, id)
			}
			seen[id] = true
		}
		if !slices.IsSorted(ids) {
			t.Errorf("%s: %d ids not in the order they were made", q, len(ids))
		}
	}
	if _, ok := queue.JobIDQueueTag("not-an-id"); ok {
		t.Error("JobIDQueueTag of a string that is not a UUID: ok")
	}
}
