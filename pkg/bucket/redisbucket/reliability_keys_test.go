package redisbucket_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
)

// The reliability suite (docs/reliability.md): a client spraying distinct keys
// at the Redis store holds Redis memory only as long as the keys' TTLs,
// and cannot push a legitimate key out of its limit.

// redisSample is one reading of the server during the spray.
type redisSample struct {
	at      time.Time
	sprayed int64 // spray decisions answered before the reading
	after   int64 // and after it
	keys    int64 // keys in the db
	expires int64 // keys with a TTL
	used    int64 // used_memory
}

// infoField reads one "name:value" integer of an INFO section.
func infoField(info, name string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// keyspace reads keys and expires of db 0 ("db0:keys=N,expires=M,...").
func keyspace(ctx context.Context, c *redis.Client) (keys, expires int64, err error) {
	info, err := c.Info(ctx, "keyspace").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		v, ok := strings.CutPrefix(line, "db0:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(val, 10, 64)
			switch name {
			case "keys":
				keys = n
			case "expires":
				expires = n
			}
		}
	}
	return keys, expires, nil
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return infoField(info, "used_memory"), nil
}

// TestReliabilityKeySprayRedis sprays distinct keys (100,000; full:
// 1,000,000) through one tier of the Redis store at Redis TIME, from 16
// goroutines, while a legitimate key sends a job every 1,000 spray keys.
// A sprayed key's state empties, and its TTL ends, a second after its job.
// Sampling the server every 100 ms, it checks that
//
//   - every key in Redis has a TTL, at every sample;
//   - at every sample the keys held are no more than the keys sprayed in
//     the last 5 s (the TTL plus Redis's expiry lag): TTLs, not the
//     number of keys sprayed, bound the memory;
//   - once the spray stops, the keys expire (only the legitimate key's
//     remains) and used_memory falls back to within 1 MiB of where it began;
//   - the legitimate key (rate 1/h, burst 9) gets exactly its 10 jobs.
func TestReliabilityKeySprayRedis(t *testing.T) {
	t.Parallel()
	total := 100_000
	if buckettest.ReliabilityFull() {
		total = 1_000_000
	}
	const (
		workers  = 16
		legitGap = 1000
		window   = 5 * time.Second // TTL (1 s) + Redis expiry lag on a loaded machine
	)
	srv := redistest.Start(t, redistest.WithOwnProcess())
	client := newClient(t, srv)
	ctx := context.Background()
	store, err := redisbucket.New(client, redisbucket.WithPrefix(redistest.KeyPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	sprayLimit := mustLimit(t, bucket.Spec{Rate: "1/s", Burst: 5, Delay: 5})
	legitLimit := mustLimit(t, bucket.Spec{Rate: "1/h", Burst: 9, Delay: 9})
	used0, err := usedMemory(ctx, client)
	if err != nil {
		t.Fatal(err)
	}

	var sprayed atomic.Int64
	var legitJobs, legitAdmitted atomic.Int64
	var samples []redisSample
	stop := make(chan struct{})
	sampled := make(chan error, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			s := redisSample{at: time.Now(), sprayed: sprayed.Load()}
			var err error
			if s.keys, s.expires, err = keyspace(ctx, client); err == nil {
				s.used, err = usedMemory(ctx, client)
			}
			if err != nil {
				sampled <- err
				return
			}
			s.after = sprayed.Load()
			samples = append(samples, s)
			select {
			case <-stop:
				sampled <- nil
				return
			case <-tick.C:
			}
		}
	}()

	began := time.Now()
	next := atomic.Int64{}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			tiers := make([]bucket.Tier, 1)
			legit := []bucket.Tier{{Key: "0:legitimate-client", Limit: legitLimit}}
			for {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				tiers[0] = bucket.Tier{Key: "0:spray-" + strconv.FormatInt(i, 10), Limit: sprayLimit}
				if _, err := store.Decide(ctx, "q", tiers, 1); err != nil {
					errs <- err
					return
				}
				sprayed.Add(1)
				if i%legitGap == 0 {
					d, err := store.Decide(ctx, "q", legit, 1)
					if err != nil {
						errs <- err
						return
					}
					legitJobs.Add(1)
					if d.Verdict == bucket.Admitted {
						legitAdmitted.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(errs)
	for err := range errs {
		t.Fatalf("a spray decision: %v", err)
	}
	// The keys expire: only the legitimate key stays (its state lasts an
	// hour).
	var drained time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for {
		keys, _, err := keyspace(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		if keys <= 1 {
			drained = time.Since(began) - elapsed
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left 60 s after the spray ended; want only the legitimate key's", keys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	if err := <-sampled; err != nil {
		t.Fatal(err)
	}
	usedEnd, err := usedMemory(ctx, client)
	if err != nil {
		t.Fatal(err)
	}

	var peak redisSample
	var noTTL int
	for i, s := range samples {
		if s.keys > peak.keys {
			peak = s
		}
		if s.used > peak.used {
			peak.used = s.used
		}
		if s.expires != s.keys {
			noTTL++
			if noTTL <= 3 {
				t.Errorf("sample %d: %d keys, %d with a TTL", i, s.keys, s.expires)
			}
		}
		// Keys sprayed in the window before this sample: the most a
		// TTL-bound store can hold, with the decisions in flight (one per
		// worker: their keys are written before they are counted) and the
		// legitimate key.
		var before int64
		for j := i; j >= 0; j-- {
			if s.at.Sub(samples[j].at) > window {
				before = samples[j].sprayed
				break
			}
		}
		if recent := s.after - before; s.keys > recent+workers+1 {
			t.Errorf("sample %d (+%v): %d keys held, but only %d sprayed in the %v before", i, s.at.Sub(began).Round(time.Millisecond), s.keys, recent, window)
		}
	}
	perKey := 0.0
	if peak.keys > 0 {
		perKey = float64(peak.used-used0) / float64(peak.keys)
	}
	t.Logf("figure: %s: %d distinct keys in %v (%.0f keys/s) into the Redis store, TTL 1 s: peak %d keys held (%.1f%% of those sprayed), peak used_memory %.1f MiB (+%.1f MiB over %.1f MiB, ~%.0f B per key held); "+
		"all keys expired %v after the spray, used_memory then %.1f MiB; %d samples, %d with a key without TTL; legitimate key: %d of %d jobs admitted (quota 10)",
		t.Name(), total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), peak.keys, 100*float64(peak.keys)/float64(total),
		mib(peak.used), mib(peak.used-used0), mib(used0), perKey, drained.Round(time.Millisecond), mib(usedEnd), len(samples), noTTL,
		legitAdmitted.Load(), legitJobs.Load())
	if len(samples) < 3 {
		t.Errorf("only %d samples of the server: the spray was too short to measure", len(samples))
	}
	if usedEnd > used0+1<<20 {
		t.Errorf("used_memory %.1f MiB after every sprayed key expired, want within 1 MiB of the %.1f MiB before", mib(usedEnd), mib(used0))
	}
	if legitAdmitted.Load() != 10 {
		t.Errorf("the legitimate key got %d of %d jobs admitted during the spray, want exactly 10 (burst 9 + 1, rate 1/h)", legitAdmitted.Load(), legitJobs.Load())
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
