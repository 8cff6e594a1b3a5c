package admin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestKeyHash(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("tenant-a"))
	if got, want := queue.KeyHash("tenant-a"), hex.EncodeToString(sum[:8]); got != want {
		t.Errorf("KeyHash = %q, want %q", got, want)
	}
	if queue.KeyHash("") == queue.KeyHash(" ") || len(queue.KeyHash(strings.Repeat("k", 1<<20))) != 16 {
		t.Error("KeyHash: want 16 hex characters, distinct for distinct keys")
	}
}

// BacklogKeys lists the deepest keys first with their first job's key,
// age and weight, and the count of each class, read from JetStream.
func TestBacklogKeys(t *testing.T) {
	t.Parallel()
	cfg := queue.Config{Name: "keys", Memory: true, LeakRate: bucket.Rate{Count: 1, Per: time.Minute}}
	ctx, b := queuetest.StartQueue(t, cfg)
	before := time.Now()
	publish := func(key string, n int, p spillway.Priority, weight int) {
		t.Helper()
		for range n {
			j := queuetest.NewJob(t, cfg.Name, key)
			j.Priority, j.Weight = p, weight
			if _, err := b.Pub.Publish(ctx, queue.Backlog, j); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("a", 1, spillway.Normal, 2) // taken by a worker below
	publish("a", 2, spillway.High, 2)
	publish("a", 3, spillway.Low, 2)
	publish("b", 3, spillway.Normal, 0)
	publish("c", 3, spillway.Low, 5)
	publish("d", 1, spillway.High, 0)
	publish("big", 70, spillway.Normal, 0)
	s, err := b.JS.Stream(ctx, queue.StreamName(cfg.Name, queue.Backlog))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, 1); err != nil { // a's first job has left
		t.Fatal(err)
	}

	keys, total, err := admin.BacklogKeys(ctx, b.JS, cfg.Name, 3)
	if err != nil {
		t.Fatal(err)
	}
	if total != 5 || len(keys) != 3 {
		t.Fatalf("BacklogKeys(top 3): %d keys of %d: %+v; want 3 of 5", len(keys), total, keys)
	}
	// b and c tie at depth 3: the order of their tokens decides.
	third := "b"
	if queue.KeyToken("c") < queue.KeyToken("b") {
		third = "c"
	}
	if got := []string{keys[0].Key, keys[1].Key, keys[2].Key}; !slices.Equal(got, []string{"big", "a", third}) {
		t.Errorf("keys %v, want big, a, %s", got, third)
	}
	age := time.Since(before)
	for _, k := range keys {
		if k.Hash != queue.KeyHash(k.Key) || k.OldestAge <= 0 || k.OldestAge > age {
			t.Errorf("key %s: hash %s, oldest age %v; want KeyHash and an age in (0, %v]", k.Key, k.Hash, k.OldestAge, age)
		}
	}
	big, a := keys[0], keys[1]
	if big.Depth != 70 || big.Weight != 1 || big.Priorities[spillway.Normal] != 70 {
		t.Errorf("big: %+v, want depth 70, weight 1, 70 normal jobs", big)
	}
	if a.Depth != 5 || a.Weight != 2 || a.Priorities[spillway.High] != 2 || a.Priorities[spillway.Normal] != 0 || a.Priorities[spillway.Low] != 3 {
		t.Errorf("a: %+v, want depth 5, weight 2, 2 high and 3 low", a)
	}

	all, total, err := admin.BacklogKeys(ctx, b.JS, cfg.Name, 0)
	if err != nil || total != 5 || len(all) != 5 || all[4].Key != "d" || all[4].Weight != 1 || all[4].Priorities[spillway.High] != 1 {
		t.Errorf("BacklogKeys(default top): %+v, %d, %v; want the 5 keys, d last, high", all, total, err)
	}
	if _, _, err := admin.BacklogKeys(ctx, b.JS, cfg.Name, admin.MaxTopKeys+1); err == nil {
		t.Errorf("top %d: no error", admin.MaxTopKeys+1)
	}
	if _, _, err := admin.BacklogKeys(ctx, b.JS, "missing", 1); err == nil {
		t.Error("a queue without streams: no error")
	}
}

// The drain leader's release counts are read from the pacer bucket when
// they are there.
func TestReadKeyReleases(t *testing.T) {
	t.Parallel()
	cfg := queue.Config{Name: "rel", Memory: true, LeakRate: bucket.Rate{Count: 1, Per: time.Second}}
	ctx, b := queuetest.StartQueue(t, cfg)
	if r, err := worker.ReadKeyReleases(ctx, b.JS, "rel"); r != nil || err != nil {
		t.Errorf("no bucket: %+v, %v; want nil, nil", r, err)
	}
	kv, err := pace.OpenPacerBucket(ctx, b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := worker.ReadKeyReleases(ctx, b.JS, "rel"); r != nil || err != nil {
		t.Errorf("no document: %+v, %v; want nil, nil", r, err)
	}
	ha, hb := queue.KeyHash("a"), queue.KeyHash("b")
	doc := `{"at": "2026-01-02T03:04:05Z", "window_s": 60, "releases": {"` + ha + `": 30, "` + hb + `": 10}}`
	if _, err := kv.Put(ctx, worker.KeyReleasesKey("rel"), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	r, err := worker.ReadKeyReleases(ctx, b.JS, "rel")
	if err != nil || r == nil {
		t.Fatalf("ReadKeyReleases: %+v, %v", r, err)
	}
	if !r.At.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || r.WindowS != 60 || r.Share(ha) != 0.75 || r.Share(hb) != 0.25 || r.Share("none") != 0 {
		t.Errorf("releases %+v: shares %v, %v", r, r.Share(ha), r.Share(hb))
	}
	if _, err := kv.Put(ctx, worker.KeyReleasesKey("rel"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.ReadKeyReleases(ctx, b.JS, "rel"); err == nil || !strings.Contains(err.Error(), "rel.keys") {
		t.Errorf("a broken document: %v, want an error naming it", err)
	}
}
