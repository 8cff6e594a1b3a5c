package redisbucket_test

import (
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// TestReliabilityHotKeyRedis: 1,000 goroutines released
// at once on one key of the Redis store get exactly what each algorithm
// allows, both through the coalesced round trips (the default: batches of
// up to 64 decisions, 2 in flight) and with coalescing off and 64 scripts
// racing in the server; at Redis TIME (the algorithms whose windows are not
// epoch-aligned) and on a frozen injected clock (every algorithm). Run it
// under -race.
func TestReliabilityHotKeyRedis(t *testing.T) {
	t.Parallel()
	per := buckettest.HotKeyPer()
	srv := redistest.Start(t)
	client := newClient(t, srv)
	frozen := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	paths := []struct {
		name string
		opts []redisbucket.Option
	}{
		{"coalesced", nil},
		{"one script per decision, 64 in flight", []redisbucket.Option{redisbucket.WithMaxBatch(1), redisbucket.WithMaxInFlight(64)}},
	}
	for _, c := range buckettest.HotKeyCases() {
		l := mustLimit(t, c.Spec)
		for _, clock := range []string{"frozen", "Redis TIME"} {
			if clock != "frozen" && c.Aligned {
				continue
			}
			for _, p := range paths {
				opts := append([]redisbucket.Option{redisbucket.WithPrefix(redistest.KeyPrefix(t))}, p.opts...)
				if clock == "frozen" {
					opts = append(opts, redisbucket.WithClock(func() time.Time { return frozen }))
				}
				store, err := redisbucket.New(client, opts...)
				if err != nil {
					t.Fatal(err)
				}
				got := buckettest.HotKey(t, store, l, 1000, per)
				buckettest.CheckHotKey(t, l, c, p.name+", "+clock+" clock", got, 1000, 1000*per)
			}
		}
	}
}
