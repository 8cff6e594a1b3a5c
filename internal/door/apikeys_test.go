package door_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/spillway-dev/spillway/internal/door"
)

// An APIKeys a door holds is replaced in place (a key file's reload) while
// requests are checked against it: each check sees one whole set, and the
// checks after Set see the new keys.
func TestAPIKeysSetWhileInUse(t *testing.T) {
	t.Parallel()
	const keyA, keyB, kept = "key-a-0123456789abcdef", "key-b-0123456789abcdef", "kept-0123456789abcdef"
	parse := func(content string) *door.APIKeys {
		t.Helper()
		k, err := door.ParseAPIKeys("keys", []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	// Both sets hold kept: one check of it, whichever set it sees, must
	// admit it; a check that saw no whole set (empty: every key let in, or
	// torn) would tell. Two checks in a row could each see another set.
	onlyA, onlyB := parse(keyA+"\n"+kept+"\n"), parse("# rotated\n"+keyB+"\n"+kept+"\n")
	var held door.APIKeys // the door's, for its life
	held.Set(onlyA)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !door.Admits(&held, kept) || door.Admits(&held, "never-a-key-0123456789") {
					t.Error("a check refused the key both sets hold, or admitted one neither holds: it saw no whole set")
					return
				}
			}
		})
	}
	for i := range 200 {
		if i%2 == 0 {
			held.Set(onlyB)
		} else {
			held.Set(onlyA)
		}
	}
	close(stop)
	wg.Wait()

	held.Set(onlyB)
	if door.Admits(&held, keyA) || !door.Admits(&held, keyB) {
		t.Error("after Set(B): want key A refused and key B allowed")
	}
	want := []string{door.KeyFingerprint(keyB), door.KeyFingerprint(kept)}
	slices.Sort(want)
	if got := held.Fingerprints(); !slices.Equal(got, want) || held.Len() != 2 {
		t.Errorf("Fingerprints %v, Len %d; want %v, 2", got, held.Len(), want)
	}
	held.Set(nil)
	if !door.Admits(&held, "anything") || held.Len() != 0 {
		t.Error("after Set(nil): want every request allowed, as without keys")
	}
}
