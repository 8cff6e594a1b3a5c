package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
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

// newClient connects to srv (REDIS_URL's server or a child) and closes the
// client when the test ends.
func newClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

type testBundle struct {
	srv    *redistest.Server
	client *redis.Client
	prefix string
	clock  *buckettest.Clock // nil without WithClock
}

// setup returns a store on a server of its own under a random prefix. With
// clock set, the store reads a manual clock standing at buckettest.Base.
func setup(t *testing.T, clock bool, opts ...redisbucket.Option) (*redisbucket.Store, *testBundle) {
	t.Helper()
	b := &testBundle{srv: redistest.Start(t), prefix: redistest.KeyPrefix(t)}
	b.client = newClient(t, b.srv)
	opts = append([]redisbucket.Option{redisbucket.WithPrefix(b.prefix)}, opts...)
	if clock {
		b.clock = buckettest.NewClock(buckettest.Base)
		opts = append(opts, redisbucket.WithClock(b.clock.Now))
	}
	s, err := redisbucket.New(b.client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func mustLimit(t testing.TB, spec bucket.Spec) bucket.Limit {
	t.Helper()
	l, err := spec.Build()
	if err != nil {
		t.Fatalf("%+v: %v", spec, err)
	}
	return l
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv)
	buckettest.Exercise(t, func(t *testing.T, clock func() time.Time) bucket.Store {
		s, err := redisbucket.New(client, redisbucket.WithClock(clock), redisbucket.WithPrefix(redistest.KeyPrefix(t)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// reference is the pure form of a store: one bucket.Bucket per tier key,
// updated all-or-nothing, and forgotten when its state is empty again (the
// store deletes such a key).
type reference map[string]*bucket.Bucket

func (ref reference) decide(t *testing.T, now time.Time, tiers []bucket.Tier, cost int64) (bucket.Decision, bool) {
	t.Helper()
	next := make([]bucket.Bucket, len(tiers))
	results := make([]bucket.TierResult, len(tiers))
	rejected := false
	for i, tier := range tiers {
		if b := ref[tier.Key]; b != nil {
			next[i] = *b
		}
		d, err := tier.Limit.Decide(&next[i], now, cost)
		if err != nil {
			t.Fatal(err)
		}
		results[i] = bucket.TierResult{Verdict: d.Verdict, NotBefore: d.NotBefore.UnixNano(),
			Remaining: d.Remaining, RetryAfter: int64(d.RetryAfter), ResetAfter: int64(d.ResetAfter)}
		rejected = rejected || d.Verdict == bucket.Rejected
	}
	if !rejected {
		for i, tier := range tiers {
			if results[i].ResetAfter == 0 {
				delete(ref, tier.Key)
			} else {
				b := next[i]
				ref[tier.Key] = &b
			}
		}
	}
	// Combine zeroes the remaining units of a refusing tier, which decides
	// the Tier among several refusing tiers of one verdict: the pure
	// decisions cannot tell which.
	d := bucket.Combine(now.UnixNano(), results)
	worst := 0
	for _, r := range results {
		if r.Verdict == d.Verdict {
			worst++
		}
	}
	return d, d.Verdict < bucket.Excess || worst == 1
}

// refund gives back, in the reference, what decision d of tiers took.
func (ref reference) refund(t *testing.T, now time.Time, tiers []bucket.Tier, cost int64, d bucket.Decision) {
	t.Helper()
	for i, tier := range tiers {
		if b := ref[tier.Key]; b != nil && d.Consumed&(1<<i) != 0 {
			if err := tier.Limit.Refund(b, now, d.At, cost); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAgreesWithPureAlgorithms replays random timelines — several keys, one
// to three tiers, costs, simultaneous arrivals, long idles, a clock that
// sometimes steps back, and refunds now and then — through the store and
// through bucket.Limit.Decide and Refund.
func TestAgreesWithPureAlgorithms(t *testing.T) {
	t.Parallel()
	specs := []bucket.Spec{
		{Rate: "1/s", Burst: 9, Delay: 3},
		{Rate: "7/3s", Burst: 4, Delay: 1},
		{Rate: "1000/s", Burst: 50, NoDelay: true},
		{Rate: "3/s"},
		{Algorithm: "token_bucket", Rate: "3/s", Burst: 5},
		{Algorithm: "token_bucket", Rate: "10/7s", Burst: 2},
		{Algorithm: "fixed_window", Limit: 5, Window: "1500ms"},
		{Algorithm: "fixed_window", Limit: 3, Window: "240h"},
		{Algorithm: "sliding_window", Limit: 7, Window: "700ms"},
		{Algorithm: "sliding_window", Limit: 4, Window: "1h"},
		{Algorithm: "sliding_log", Limit: 4, Window: "333ms"},
		{Algorithm: "sliding_log", Limit: 6, Window: "2s"},
	}
	limits := make([]bucket.Limit, len(specs))
	for i, s := range specs {
		limits[i] = mustLimit(t, s)
	}
	boundaries := []time.Duration{time.Millisecond, 100 * time.Millisecond, 333 * time.Millisecond,
		time.Second / 3, 3 * time.Second / 7, 700 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second}
	store, b := setup(t, true)
	ctx := context.Background()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			ref := reference{}
			refunds := 0
			group := fmt.Sprint("g", seed)
			// Start at an odd nanosecond, some seeds before 1970.
			now := buckettest.Base.Add(time.Duration(rng.Int64N(int64(time.Second))))
			if seed%3 == 2 {
				now = time.Date(1969, 12, 31, 23, 59, 58, 999_999_999, time.UTC)
			}
			for i := range 1500 {
				switch r := rng.IntN(100); {
				case r < 25: // simultaneous
				case r < 40: // the limits' own periods, to land on boundaries
					now = now.Add(boundaries[rng.IntN(len(boundaries))])
				case r < 85:
					now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				case r < 95:
					now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
				case r < 98:
					now = now.Add(-time.Duration(rng.Int64N(int64(3 * time.Second))))
				default:
					now = now.Add(time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))
				}
				n := 1 + rng.IntN(3)
				tiers := make([]bucket.Tier, 0, n)
				for _, li := range rng.Perm(len(limits))[:n] {
					tiers = append(tiers, bucket.Tier{Key: fmt.Sprintf("%d:k%d", li, rng.IntN(3)), Limit: limits[li]})
				}
				cost := int64(1)
				if rng.IntN(4) == 0 {
					cost += rng.Int64N(8)
				}
				want, tierKnown := ref.decide(t, now, tiers, cost)
				b.clock.Set(now)
				got, err := store.Decide(ctx, group, tiers, cost)
				if err != nil {
					t.Fatal(err)
				}
				if !tierKnown {
					got.Tier = want.Tier
				}
				if !equalDecision(got, want) {
					t.Fatalf("step %d at %s, cost %d, tiers %v:\nstore %+v\n pure %+v", i, now.Format(time.RFC3339Nano), cost, tiers, got, want)
				}
				if got.Consumed == 0 || rng.IntN(5) != 0 {
					continue
				}
				// The backlog refused the job: give its units back, at
				// once or a little later (or, rarely, earlier).
				switch r := rng.IntN(10); {
				case r < 4:
				case r < 9:
					now = now.Add(time.Duration(rng.Int64N(int64(time.Second))))
				default:
					now = now.Add(-time.Duration(rng.Int64N(int64(time.Second))))
				}
				ref.refund(t, now, tiers, cost, got)
				b.clock.Set(now)
				if err := got.Refund(ctx); err != nil {
					t.Fatal(err)
				}
				refunds++
			}
			t.Logf("%d refunds", refunds)
		})
	}
}

func equalDecision(a, b bucket.Decision) bool {
	return a.Verdict == b.Verdict && a.At.Equal(b.At) && a.NotBefore.Equal(b.NotBefore) && a.Tier == b.Tier &&
		a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter &&
		a.Consumed == b.Consumed
}

// keys lists the keys under prefix.
func keys(t *testing.T, b *testBundle) []string {
	t.Helper()
	ks, err := b.client.Keys(context.Background(), b.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func allLimits(t *testing.T) []bucket.Limit {
	var ls []bucket.Limit
	for _, s := range []bucket.Spec{
		{Rate: "1/s", Burst: 9, Delay: 3},
		{Algorithm: "token_bucket", Rate: "1/s", Burst: 10},
		{Algorithm: "fixed_window", Limit: 10, Window: "1h"},
		{Algorithm: "sliding_log", Limit: 10, Window: "1m"},
		{Algorithm: "sliding_window", Limit: 10, Window: "1m"},
	} {
		ls = append(ls, mustLimit(t, s))
	}
	return ls
}

// TestEveryKeyHasATTL decides with every algorithm at Redis TIME and checks
// that each key expires no earlier than its state empties, and not much
// later.
func TestEveryKeyHasATTL(t *testing.T) {
	t.Parallel()
	store, b := setup(t, false)
	ctx := context.Background()
	for _, l := range allLimits(t) {
		tiers := []bucket.Tier{{Key: "k", Limit: l}}
		var d bucket.Decision
		for range 3 {
			var err error
			d, err = store.Decide(ctx, "q", tiers, 1)
			if err != nil {
				t.Fatal(err)
			}
		}
		key := store.Key("q", l.Algorithm(), "k")
		pttl, err := b.client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The TTL is ResetAfter rounded up to the millisecond plus one,
		// set a moment before PTTL reads it.
		if pttl <= 0 || pttl > d.ResetAfter+2*time.Millisecond || pttl < d.ResetAfter-time.Second {
			t.Errorf("%s: PTTL %v, want about the decision's ResetAfter %v", l, pttl, d.ResetAfter)
		}
	}
	for _, k := range keys(t, b) {
		if pttl := b.client.PTTL(ctx, k).Val(); pttl <= 0 {
			t.Errorf("key %q has PTTL %v", k, pttl)
		}
	}
	if n := len(keys(t, b)); n != 5 {
		t.Errorf("%d keys, want 5", n)
	}
}

// TestEmptyStateIsDeleted: a key whose state is empty again holds no memory.
func TestEmptyStateIsDeleted(t *testing.T) {
	t.Parallel()
	store, b := setup(t, true)
	ctx := context.Background()
	token := mustLimit(t, bucket.Spec{Algorithm: "token_bucket", Rate: "1/s", Burst: 2})
	tiers := []bucket.Tier{{Key: "k", Limit: token}}
	if _, err := store.Decide(ctx, "q", tiers, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(keys(t, b)); n != 1 {
		t.Fatalf("%d keys after a decision, want 1", n)
	}
	b.clock.Set(buckettest.Base.Add(time.Second))
	// A job too large for the full bucket: excess, and the state is full
	// (empty of history) again.
	d, err := store.Decide(ctx, "q", tiers, 3)
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != bucket.Excess || d.ResetAfter != 0 {
		t.Fatalf("decision %+v, want excess with ResetAfter 0", d)
	}
	if ks := keys(t, b); len(ks) != 0 {
		t.Errorf("keys %q remain, want none", ks)
	}
}

// TestKeysAreHashTagged: every key carries a hash tag of its group and a
// 64-bit hash of its tier key, so that a group's keys spread over a
// cluster's slots.
func TestKeysAreHashTagged(t *testing.T) {
	t.Parallel()
	store, b := setup(t, false)
	ctx := context.Background()
	ls := allLimits(t)
	var tiers []bucket.Tier
	for i, l := range ls {
		tiers = append(tiers, bucket.Tier{Key: fmt.Sprintf("%d:alice", i), Limit: l})
	}
	for _, group := range []string{"email", "", "with space:and:colons"} {
		if _, err := store.Decide(ctx, group, tiers, 1); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{}
	for _, group := range []string{"email", "", "with space:and:colons"} {
		for i, l := range ls {
			want[fmt.Sprintf("%s{%s:<hash>}:%s:%d:alice", b.prefix, group, l.Algorithm(), i)] = true
		}
	}
	got := keys(t, b)
	hashOf := map[string]string{} // tier key → its hash, the same in every group
	tagged := regexp.MustCompile(`^(.*)\{(.*):([0-9a-f]{16})\}:([a-z_]+):(.*)$`)
	for _, k := range got {
		m := tagged.FindStringSubmatch(k)
		if m == nil {
			t.Errorf("key %q has no {group:hash} tag", k)
			continue
		}
		if h, ok := hashOf[m[5]]; ok && h != m[3] {
			t.Errorf("key %q: tier key %q hashed to %s elsewhere", k, m[5], h)
		}
		hashOf[m[5]] = m[3]
		generic := fmt.Sprintf("%s{%s:<hash>}:%s:%s", m[1], m[2], m[4], m[5])
		if !want[generic] {
			t.Errorf("unexpected key %q", k)
		}
		delete(want, generic)
	}
	for k := range want {
		t.Errorf("missing key %q (have %q)", k, got)
	}
	if len(hashOf) != len(ls) {
		t.Errorf("%d tier keys hashed to %d hashes", len(ls), len(hashOf))
	}

	for _, g := range []string{"a{b", "a}b", "{a}"} {
		if _, err := store.Decide(ctx, g, tiers, 1); !errors.Is(err, redisbucket.ErrInvalidGroup) {
			t.Errorf("group %q: error %v, want ErrInvalidGroup", g, err)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	for name, opt := range map[string]redisbucket.Option{
		"nil clock":      redisbucket.WithClock(nil),
		"brace prefix":   redisbucket.WithPrefix("a{b}:"),
		"batch 0":        redisbucket.WithMaxBatch(0),
		"batch huge":     redisbucket.WithMaxBatch(1 << 20),
		"in flight 0":    redisbucket.WithMaxInFlight(0),
		"negative limit": redisbucket.WithTimeout(-time.Second),
	} {
		if _, err := redisbucket.New(client, opt); !errors.Is(err, redisbucket.ErrInvalidOption) {
			t.Errorf("%s: error %v, want ErrInvalidOption", name, err)
		} else if !strings.HasPrefix(err.Error(), "redisbucket: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
	if _, err := redisbucket.New(nil); !errors.Is(err, redisbucket.ErrInvalidOption) {
		t.Errorf("nil client: error %v, want ErrInvalidOption", err)
	}
	if _, err := redisbucket.New(client, redisbucket.WithPrefix(""), redisbucket.WithMaxBatch(1),
		redisbucket.WithMaxInFlight(64), redisbucket.WithTimeout(time.Second)); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestScriptFlushNeverSurfaces flushes the script cache over and over while
// many callers decide, alone and in batches of several groups.
func TestScriptFlushNeverSurfaces(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithOwnProcess()) // SCRIPT FLUSH is server-wide
	client := newClient(t, srv)
	store, err := redisbucket.New(client, redisbucket.WithPrefix(redistest.KeyPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	l := mustLimit(t, bucket.Spec{Rate: "1000000/s", Burst: 1000})
	ctx := context.Background()

	var flushes atomic.Int64
	stop := make(chan struct{})
	var flushers sync.WaitGroup
	for range 2 {
		flushers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := client.ScriptFlush(ctx).Err(); err != nil {
					t.Error(err)
					return
				}
				flushes.Add(1)
			}
		})
	}
	var deciders sync.WaitGroup
	var errs, decided atomic.Int64
	for g := range 32 {
		deciders.Go(func() {
			tiers := []bucket.Tier{{Key: fmt.Sprint("k", g), Limit: l}}
			for range 300 {
				if _, err := store.Decide(ctx, fmt.Sprint("group", g%3), tiers, 1); err != nil {
					if errs.Add(1) < 5 {
						t.Errorf("decide: %v", err)
					}
					continue
				}
				decided.Add(1)
			}
		})
	}
	deciders.Wait()
	close(stop)
	flushers.Wait()
	if errs.Load() != 0 {
		t.Errorf("%d errors among %d decisions", errs.Load(), errs.Load()+decided.Load())
	}
	if flushes.Load() < 10 {
		t.Errorf("only %d SCRIPT FLUSHes ran; the test proves little", flushes.Load())
	}
	t.Logf("%d decisions, %d SCRIPT FLUSHes", decided.Load(), flushes.Load())
}

// TestServerRestart: a dead server is an error, never a panic; a new, empty
// server (no scripts cached) works at once.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithOwnProcess())
	client := newClient(t, srv)
	store, err := redisbucket.New(client, redisbucket.WithPrefix(redistest.KeyPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	tiers := []bucket.Tier{{Key: "k", Limit: mustLimit(t, bucket.Spec{Rate: "1/s"})}}
	ctx := context.Background()
	if _, err := store.Decide(ctx, "g", tiers, 1); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := store.Decide(ctx, "g", tiers, 1); err == nil || !strings.HasPrefix(err.Error(), "redisbucket: ") {
		t.Fatalf("decide on a dead server: error %v, want a redisbucket error", err)
	}
	srv.Restart(t)
	d, err := store.Decide(ctx, "g", tiers, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != bucket.Admitted {
		t.Errorf("first decision on an empty server: %s, want admitted", d.Verdict)
	}
}

// TestForeignData: a key holding something else fails its own decision only.
func TestForeignData(t *testing.T) {
	t.Parallel()
	store, b := setup(t, false)
	ctx := context.Background()
	for _, l := range allLimits(t) {
		key := store.Key("g", l.Algorithm(), "bad")
		if err := b.client.HSet(ctx, key, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		tiers := []bucket.Tier{{Key: "good", Limit: l}, {Key: "bad", Limit: l}}
		_, err := store.Decide(ctx, "g", tiers, 1)
		if !errors.Is(err, redisbucket.ErrForeignData) || !strings.Contains(err.Error(), "tier 1") {
			t.Errorf("%s: error %v, want ErrForeignData naming tier 1", l, err)
		}
		if n := b.client.Exists(ctx, store.Key("g", l.Algorithm(), "good")).Val(); n != 0 {
			t.Errorf("%s: the good tier was written although the decision failed", l)
		}
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	store, b := setup(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tiers := []bucket.Tier{{Key: "k", Limit: mustLimit(t, bucket.Spec{Rate: "1/s"})}}
	if _, err := store.Decide(ctx, "g", tiers, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if ks := keys(t, b); len(ks) != 0 {
		t.Errorf("a cancelled decision wrote %q", ks)
	}
}

// TestClusterAndRing runs decisions through a *redis.ClusterClient against a
// one-node Redis Cluster, which refuses a script touching keys of two slots,
// and through a *redis.Ring.
func TestClusterAndRing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithOwnProcess(),
		redistest.WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	admin := newClient(t, srv)
	ctx := context.Background()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if time.Now().After(deadline) {
			t.Fatal("the one-node cluster never became ok")
		}
		time.Sleep(20 * time.Millisecond) // polling the server's state, not our goroutines
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { _ = cluster.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })

	ls := allLimits(t)
	for name, client := range map[string]redisbucket.Client{"cluster": cluster, "ring": ring} {
		store, err := redisbucket.New(client, redisbucket.WithPrefix(redistest.KeyPrefix(t)))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 24 {
			wg.Go(func() {
				var tiers []bucket.Tier
				for i, l := range ls {
					tiers = append(tiers, bucket.Tier{Key: fmt.Sprintf("%d:client%d", i, g), Limit: l})
				}
				for range 20 {
					d, err := store.Decide(ctx, fmt.Sprint("queue", g%4), tiers, 1)
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					if d.Verdict == bucket.Rejected && d.Tier != 0 {
						t.Errorf("%s: rejected by tier %d", name, d.Tier)
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestLongSlidingLog drives a sliding log past the script's scanning chunk:
// hundreds of entries, a retry-after found deep in the log, and more than a
// chunk of entries expiring at once.
func TestLongSlidingLog(t *testing.T) {
	t.Parallel()
	store, b := setup(t, true)
	l := mustLimit(t, bucket.Spec{Algorithm: "sliding_log", Limit: 400, Window: "10s"})
	tiers := []bucket.Tier{{Key: "k", Limit: l}}
	ref := reference{}
	ctx := context.Background()
	step := func(at time.Duration, cost int64) bucket.Decision {
		t.Helper()
		now := buckettest.Base.Add(at)
		want, _ := ref.decide(t, now, tiers, cost)
		b.clock.Set(now)
		got, err := store.Decide(ctx, "g", tiers, cost)
		if err != nil {
			t.Fatal(err)
		}
		if !equalDecision(got, want) {
			t.Fatalf("+%v cost %d:\nstore %+v\n pure %+v", at, cost, got, want)
		}
		return got
	}
	for i := range 400 {
		step(time.Duration(i)*time.Millisecond, 1)
	}
	if d := step(time.Second, 200); d.Verdict != bucket.Excess || d.RetryAfter != 9*time.Second+199*time.Millisecond {
		t.Errorf("cost 200 on a full log: %s, retry after %v; want excess after 9.199s", d.Verdict, d.RetryAfter)
	}
	if d := step(10*time.Second+150*time.Millisecond, 140); d.Verdict != bucket.Admitted || d.Remaining != 11 {
		t.Errorf("after 151 entries expired: %s, %d remaining; want admitted, 11", d.Verdict, d.Remaining)
	}
	if n, err := b.client.LLen(ctx, store.Key("g", bucket.SlidingLog, "k")).Result(); err != nil || n != 1+249+1 {
		t.Errorf("the log holds %d elements (%v), want a header and 250 entries", n, err)
	}
	for i := range 50 {
		step(10*time.Second+150*time.Millisecond+time.Duration(i)*37*time.Millisecond, 1+int64(i%3))
	}
}

// scriptCalls counts the script commands a client sends.
type scriptCalls struct{ names []string }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.names = append(h.names, name)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRefundAtRedisTime refunds at Redis TIME: the refund of every tier is
// one script run (EVALSHA, and EVAL where the script is not cached); a key
// whose state is empty again is deleted; a key that still holds units gets
// the TTL of the state it now holds, that of a key that never saw the
// refunded job.
func TestRefundAtRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithOwnProcess()) // a server that has run no refund
	b := &testBundle{srv: srv, client: newClient(t, srv), prefix: redistest.KeyPrefix(t)}
	calls := &scriptCalls{}
	b.client.AddHook(calls)
	store, err := redisbucket.New(b.client, redisbucket.WithPrefix(b.prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ls := allLimits(t)
	tiersOf := func(key string) []bucket.Tier {
		var tiers []bucket.Tier
		for i, l := range ls {
			tiers = append(tiers, bucket.Tier{Key: fmt.Sprintf("%d:%s", i, key), Limit: l})
		}
		return tiers
	}
	decide := func(key string) bucket.Decision {
		t.Helper()
		d, err := store.Decide(ctx, "q", tiersOf(key), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Consumed != 0b11111 {
			t.Fatalf("key %s: %+v, want every tier to consume", key, d)
		}
		return d
	}
	refund := func(key string, d bucket.Decision) {
		t.Helper()
		calls.names = nil
		if err := d.Refund(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// One job given back: every key is gone. The new server does not know
	// the refund script yet.
	refund("one", decide("one"))
	if fmt.Sprint(calls.names) != "[evalsha eval]" {
		t.Errorf("the first refund sent %v, want EVALSHA, NOSCRIPT, then EVAL", calls.names)
	}
	if ks := keys(t, b); len(ks) != 0 {
		t.Errorf("keys %q remain after the only job was given back", ks)
	}

	// Two jobs kept, a third given back: as if there had been two.
	decide("kept")
	decide("kept")
	decide("refunded")
	decide("refunded")
	refund("refunded", decide("refunded"))
	if fmt.Sprint(calls.names) != "[evalsha]" {
		t.Errorf("the refund of five tiers sent %v, want one EVALSHA", calls.names)
	}
	for i, l := range ls {
		key := func(k string) string { return store.Key("q", l.Algorithm(), fmt.Sprintf("%d:%s", i, k)) }
		kept, err := b.client.PTTL(ctx, key("kept")).Result()
		if err != nil {
			t.Fatal(err)
		}
		refunded, err := b.client.PTTL(ctx, key("refunded")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if refunded <= 0 || (refunded-kept).Abs() > 250*time.Millisecond {
			t.Errorf("%s: PTTL %v after the refund, want about %v, that of a key with two jobs", l, refunded, kept)
		}
	}
}

// TestRefundForeignData: a refund whose key holds something else changes
// nothing and says which key.
func TestRefundForeignData(t *testing.T) {
	t.Parallel()
	store, b := setup(t, true)
	ctx := context.Background()
	for _, l := range allLimits(t) {
		tiers := []bucket.Tier{{Key: "good", Limit: l}, {Key: "bad", Limit: l}}
		d, err := store.Decide(ctx, "g", tiers, 1)
		if err != nil {
			t.Fatal(err)
		}
		good := store.Key("g", l.Algorithm(), "good")
		bad := store.Key("g", l.Algorithm(), "bad")
		before := b.client.Dump(ctx, good).Val()
		if err := b.client.Del(ctx, bad).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.client.HSet(ctx, bad, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		err = d.Refund(ctx)
		if !errors.Is(err, redisbucket.ErrForeignData) || !strings.Contains(err.Error(), ":bad") {
			t.Errorf("%s: error %v, want ErrForeignData naming the bad key", l, err)
		}
		if after := b.client.Dump(ctx, good).Val(); after != before {
			t.Errorf("%s: the good tier was changed although the refund failed", l)
		}
	}
}
