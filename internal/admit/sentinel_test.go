package admit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/bucket/buckettest"
)

// TestReliabilitySentinelFailover kills the Sentinel-managed master while 8
// goroutines decide through the admitter's Failover on a client built from
// redis.sentinel (internal/conn), for failure modes closed and open. It
// checks that
//
//   - every request is answered with a defined verdict: a decision of
//     Redis, or the failure mode's (closed: ErrStoreUnavailable with a
//     Retry-After; open: admitted) — 0 lost, no other error;
//   - while no master answers, decisions take the failure mode;
//   - once the sentinels name the new master, decisions go back to Redis
//     by themselves (the same client, no restart) within 1 s (full mode;
//     5 s in the short run, which logs the figure).
//
// Full mode (SPILLWAY_RELIABILITY=full) uses three sentinels (quorum 2)
// and kills the master three times, each time restarting the old one,
// which the sentinels turn into the new master's replica.
func TestReliabilitySentinelFailover(t *testing.T) {
	t.Parallel()
	for _, mode := range []config.FailureMode{config.FailClosed, config.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			sentinelFailover(t, mode)
		})
	}
}

// answered is what one decision came to.
type answered struct {
	at  time.Time
	src admit.Source
	err error
}

func sentinelFailover(t *testing.T, mode config.FailureMode) {
	sentinels, kills := 1, 1
	if buckettest.ReliabilityFull() {
		sentinels, kills = 3, 3
	}
	st := redistest.StartSentinel(t, sentinels)
	cfg := conn.RedisConfig{
		Sentinel: &conn.RedisSentinel{MasterName: redistest.SentinelMaster, Addrs: st.SentinelAddrs()},
		Timeout:  200 * time.Millisecond,
	}
	client, store, err := conn.Redis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	f, err := admit.NewFailover(store, mode)
	if err != nil {
		t.Fatal(err)
	}
	l, err := bucket.NewTokenBucket(bucket.Rate{Count: 1_000_000, Per: time.Second}, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var outcomes []answered
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			tiers := []bucket.Tier{{Key: "k" + string(rune('a'+g)), Limit: l}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				_, src, err := f.DecideFrom(context.Background(), "q", tiers, 1)
				mu.Lock()
				outcomes = append(outcomes, answered{time.Now(), src, err})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // a steady load, not a spin
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	time.Sleep(300 * time.Millisecond) // some decisions before the kill

	type event struct{ killed, failedOver time.Time }
	var events []event
	for k := range kills {
		old, err := st.MasterAddr(ctx)
		if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		dead, err := st.KillMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.WaitFailover(ctx, old); err != nil {
			t.Fatal(err)
		}
		failedOver := time.Now()
		events = append(events, event{killed, failedOver})
		// Decisions after the failover: 1.5 s of them, and on until one is
		// decided in Redis again (the bound is checked below) or 20 s pass.
		time.Sleep(1500 * time.Millisecond)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			back := len(outcomes) > 0 && outcomes[len(outcomes)-1].src == admit.FromPrimary && outcomes[len(outcomes)-1].at.After(failedOver)
			mu.Unlock()
			if back {
				break
			}
		}
		if k+1 < kills {
			dead.Restart(t) // comes back; the sentinels make it a replica
			if err := waitReplicaUp(ctx, dead); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()

	if n := int64(len(outcomes)); n != sent.Load() {
		t.Fatalf("%d requests sent, %d answered", sent.Load(), n)
	}
	var fallbacks int
	for _, o := range outcomes {
		switch {
		case o.err == nil && o.src == admit.FromPrimary:
		case mode == config.FailClosed && errors.Is(o.err, admit.ErrStoreUnavailable) && o.src == admit.FromClosed:
			fallbacks++
		case mode == config.FailOpen && o.err == nil && o.src == admit.FromOpen:
			fallbacks++
		default:
			t.Fatalf("an answer outside the contract: source %v, error %v", o.src, o.err)
		}
	}
	for i, e := range events {
		var firstFallback, back time.Time
		for _, o := range outcomes {
			if o.at.Before(e.killed) {
				continue
			}
			if o.src != admit.FromPrimary && firstFallback.IsZero() {
				firstFallback = o.at
			}
			if o.src == admit.FromPrimary && !o.at.Before(e.failedOver) {
				back = o.at
				break
			}
		}
		if firstFallback.IsZero() {
			t.Errorf("kill %d: no decision took the failure mode while no master answered", i)
		}
		if back.IsZero() {
			t.Fatalf("kill %d: decisions never went back to Redis after the failover", i)
		}
		failover := e.failedOver.Sub(e.killed)
		t.Logf("figure: sentinel (%d), failure mode %s, kill %d: failure mode from %v after the kill; the sentinels named the new master after %v; decisions back in Redis %v after that",
			sentinels, mode, i+1, firstFallback.Sub(e.killed).Round(time.Millisecond), failover.Round(time.Millisecond), back.Sub(e.failedOver).Round(time.Millisecond))
		// The bound is 1 s in full mode and 5 s in the short run, on a
		// loaded CI machine.
		if bound := backBound(); back.Sub(e.failedOver) > bound {
			t.Errorf("kill %d: decisions went back to Redis %v after the failover, want within %v", i, back.Sub(e.failedOver), bound)
		}
	}
	t.Logf("figure: sentinel (%d), failure mode %s: %d requests, %d answered (0 lost), %d by the failure mode", sentinels, mode, sent.Load(), len(outcomes), fallbacks)
}

// waitReplicaUp waits until srv replicates the new master.
func waitReplicaUp(ctx context.Context, srv *redistest.Server) error {
	for {
		reply, err := srv.Do(ctx, "ROLE")
		if l, ok := reply.([]any); err == nil && ok && len(l) >= 4 && l[0] == "slave" && l[3] == "connected" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// backBound is how soon after a failover decisions must be back in Redis.
func backBound() time.Duration {
	if buckettest.ReliabilityFull() {
		return time.Second
	}
	return 5 * time.Second
}
