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
	const keyA, keyB = "key-a-0123456789abcdef", "key-b-0123456789abcdef"
	parse := func(content string) *door.APIKeys {
		t.Helper()
		k, err := door.ParseAPIKeys("keys", []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	onlyA, onlyB := parse(keyA+"\n"), parse("# rotated\n"+keyB+"\n")
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
				if !door.Admits(&held, keyA) && !door.Admits(&held, keyB) {
					t.Error("a check refused both keys: it saw no whole set")
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
	if got, want := held.Fingerprints(), []string{door.KeyFingerprint(keyB)}; !slices.Equal(got, want) || held.Len() != 1 {
		t.Errorf("Fingerprints %v, Len %d; want %v, 1", got, held.Len(), want)
	}
	held.Set(nil)
	if !door.Admits(&held, "anything") || held.Len() != 0 {
		t.Error("after Set(nil): want every request allowed, as without keys")
	}
}
