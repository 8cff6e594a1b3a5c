package bucket_test

import (
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
)

// TestReliabilityHotKeyMemory: 1,000 goroutines released
// at once on one key of the memory store get exactly what each algorithm
// allows — the quota accepted, split into admitted and queued as the
// algorithm says, every other decision refused — on a frozen clock (every
// algorithm) and on the store's own clock (the algorithms whose windows are
// not epoch-aligned). Run it under -race.
func TestReliabilityHotKeyMemory(t *testing.T) {
	t.Parallel()
	per := buckettest.HotKeyPer()
	frozen := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, c := range buckettest.HotKeyCases() {
		l, err := c.Spec.Build()
		if err != nil {
			t.Fatal(err)
		}
		for _, clock := range []string{"frozen", "real"} {
			if clock == "real" && c.Aligned {
				continue
			}
			var opts []bucket.MemoryOption
			if clock == "frozen" {
				opts = append(opts, bucket.WithClock(func() time.Time { return frozen }))
			}
			store, err := bucket.NewMemory(opts...)
			if err != nil {
				t.Fatal(err)
			}
			got := buckettest.HotKey(t, store, l, 1000, per)
			buckettest.CheckHotKey(t, l, c, clock+" clock", got, 1000, 1000*per)
		}
	}
}
