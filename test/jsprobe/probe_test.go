// Package jsprobe checks the JetStream behaviour Spillway's backlog relies on
// (docs/jetstream-backlog.md) against two real servers:
//
//   - "nats-server-bin": the nats-server binary on PATH (Debian ships 2.9 at
//     /usr/sbin/nats-server), started on a random port with its own store
//     directory; override with NATS_SERVER_BIN.
//   - "embedded": the github.com/nats-io/nats-server/v2 module in-process.
//
// Run with -v to see every observation (exact error codes and texts):
//
//	go test -count=1 -v ./test/jsprobe/
package jsprobe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The limits every backlog stream in this probe uses.
const (
	capacity       = 5
	perKeyCapacity = 3
)

// backend is one running server; js talks to it.
type backend struct {
	name string
	js   jetstream.JetStream
}

func backends(t *testing.T) []backend {
	t.Helper()
	if testing.Short() {
		t.Skip("probe starts real servers and waits on ack timers; skipped with -short")
	}
	bs := []backend{{name: "embedded", js: connect(t, startEmbedded(t))}}
	if bin := findBinary(t); bin != "" {
		bs = append([]backend{{name: "nats-server-bin", js: connect(t, startBinary(t, bin))}}, bs...)
	}
	return bs
}

// findBinary returns the nats-server binary to probe besides the embedded module:
// $NATS_SERVER_BIN (must exist), else nats-server on PATH or /usr/sbin/nats-server.
func findBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NATS_SERVER_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("NATS_SERVER_BIN: %v", err)
		}
		return bin
	}
	if bin, err := exec.LookPath("nats-server"); err == nil {
		return bin
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no nats-server binary found, and CI must probe Debian's server too: apt-get install -y nats-server (.ci/run does), or set NATS_SERVER_BIN")
	}
	t.Log("NO nats-server BINARY FOUND: probing the embedded server only (apt-get install nats-server, or set NATS_SERVER_BIN)")
	return ""
}

// startBinary starts our own nats-server process (never a shared one on 4222).
func startBinary(t *testing.T, bin string) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logFile := filepath.Join(dir, "server.log")
	// t.Context is cancelled just before cleanups run: stop the server gracefully
	// then, after WaitDelay, kill it.
	cmd := exec.CommandContext(t.Context(), bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", filepath.Join(dir, "js"), "-l", logFile)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return url
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("%s did not come up on %s: %v\n%s", bin, url, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startEmbedded(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready")
	}
	return s.ClientURL()
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func forEach(t *testing.T, f func(t *testing.T, ctx context.Context, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			var ver string
			if nc := b.js.Conn(); nc != nil {
				ver = nc.ConnectedServerVersion()
			}
			t.Logf("server version %s", ver)
			f(t, ctx, b)
		})
	}
}

// describe renders an error the way the write-up quotes it.
func describe(err error) string {
	if err == nil {
		return "ok"
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("APIError{Code:%d ErrorCode:%d Description:%q} Error()=%q", ae.Code, ae.ErrorCode, ae.Description, err.Error())
	}
	return fmt.Sprintf("%T Error()=%q", err, err.Error())
}

// backlogConfig is a stream for queue q with subjects spillway.backlog.<q>.<key>.
func backlogConfig(q string, ret jetstream.RetentionPolicy) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 "BACKLOG_" + q,
		Subjects:             []string{"spillway.backlog." + q + ".*"},
		Retention:            ret,
		Storage:              jetstream.FileStorage,
		MaxMsgs:              capacity,
		MaxMsgsPerSubject:    perKeyCapacity,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           time.Minute,
	}
}

func subj(q, key string) string { return "spillway.backlog." + q + "." + key }

func mustStream(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %s", cfg.Name, describe(err))
	}
	return s
}

func msgs(t *testing.T, ctx context.Context, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// publish publishes one message and logs the outcome.
func publish(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	t.Helper()
	ack, err := js.Publish(ctx, subject, []byte(subject), opts...)
	if err != nil {
		t.Logf("publish %s: %s", subject, describe(err))
	} else {
		t.Logf("publish %s: ok seq=%d duplicate=%v", subject, ack.Sequence, ack.Duplicate)
	}
	return ack, err
}

// Error classification as Spillway's publisher would do it.
var (
	errQueueFull    = errors.New("queue full")
	errKeyQueueFull = errors.New("key queue full")
)

// classify maps a publish error on a DiscardNew stream to the backlog's errors:
// both limits come back as JetStream API error 10077 (JSStreamStoreFailedF, "{err}"),
// so only the description tells them apart.
func classify(err error) error {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != 10077 {
		return err
	}
	switch ae.Description {
	case "maximum messages per subject exceeded":
		return errKeyQueueFull
	case "maximum messages exceeded":
		return errQueueFull
	}
	return err
}

// Q1/Q2/Q5: which retention policies accept the limits, and are they enforced.
func TestLimits(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, b backend) {
		for _, ret := range []jetstream.RetentionPolicy{jetstream.WorkQueuePolicy, jetstream.LimitsPolicy, jetstream.InterestPolicy} {
			t.Run(ret.String(), func(t *testing.T) {
				q := "lim" + strings.ToLower(strings.ReplaceAll(ret.String(), " ", ""))
				cfg := backlogConfig(q, ret)
				s, err := b.js.CreateStream(ctx, cfg)
				t.Logf("create %s stream with MaxMsgs/MaxMsgsPerSubject/DiscardNew/DiscardNewPerSubject: %s", ret, describe(err))
				if err != nil {
					t.Fatal(err)
				}
				got := s.CachedInfo().Config
				t.Logf("config echoed: retention=%s max_msgs=%d max_msgs_per_subject=%d discard=%s discard_new_per_subject=%v",
					got.Retention, got.MaxMsgs, got.MaxMsgsPerSubject, got.Discard, got.DiscardNewPerSubject)
				if !got.DiscardNewPerSubject {
					t.Error("server dropped DiscardNewPerSubject")
				}
				if ret == jetstream.InterestPolicy {
					// Interest streams drop messages nobody is interested in; give it a consumer.
					if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
						t.Fatal(err)
					}
				}

				// Stream-wide: capacity+3 publishes to distinct keys.
				var ok, queueFull int
				for i := range capacity + 3 {
					_, err := publish(t, ctx, b.js, subj(q, fmt.Sprintf("k%d", i)))
					switch {
					case err == nil:
						ok++
					case errors.Is(classify(err), errQueueFull):
						queueFull++
					default:
						t.Errorf("unexpected error: %s", describe(err))
					}
				}
				n := msgs(t, ctx, s)
				t.Logf("stream-wide: %d ok, %d queue-full, stored %d", ok, queueFull, n)
				if ok != capacity || queueFull != 3 || n != capacity {
					t.Errorf("stream-wide limit: ok=%d full=%d stored=%d, want %d/3/%d", ok, queueFull, n, capacity, capacity)
				}

				// Per key: per-key capacity+2 publishes to key a, then key b still accepted.
				if err := s.Purge(ctx); err != nil {
					t.Fatal(err)
				}
				ok, keyFull := 0, 0
				for range perKeyCapacity + 2 {
					_, err := publish(t, ctx, b.js, subj(q, "a"))
					switch {
					case err == nil:
						ok++
					case errors.Is(classify(err), errKeyQueueFull):
						keyFull++
					default:
						t.Errorf("unexpected error: %s", describe(err))
					}
				}
				if ok != perKeyCapacity || keyFull != 2 {
					t.Errorf("per-key limit: ok=%d key-full=%d, want %d/2", ok, keyFull, perKeyCapacity)
				}
				if _, err := publish(t, ctx, b.js, subj(q, "b")); err != nil {
					t.Errorf("other key refused while key a is full: %s", describe(err))
				}
				if _, err := publish(t, ctx, b.js, subj(q, "b")); err != nil {
					t.Errorf("other key refused: %s", describe(err))
				}
				// Stream is now full (a×3, b×2). Which error wins when both limits apply?
				_, errBoth := publish(t, ctx, b.js, subj(q, "a"))
				t.Logf("both limits hit (key a full and stream full): %s", describe(errBoth))
				_, errStream := publish(t, ctx, b.js, subj(q, "c"))
				t.Logf("stream full, key c empty: %s", describe(errStream))
				if !errors.Is(classify(errStream), errQueueFull) {
					t.Errorf("stream full: got %s", describe(errStream))
				}

				// Q2: does an ack free a slot?
				cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
				if err != nil {
					t.Fatal(err)
				}
				m := fetchOne(t, cons, time.Second)
				if m == nil {
					t.Fatal("no message fetched")
				}
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatal(err)
				}
				after := msgs(t, ctx, s)
				_, errAfterAck := publish(t, ctx, b.js, subj(q, "c"))
				t.Logf("after ack of seq %d: stored %d, publish to c: %s", seq(t, m), after, describe(errAfterAck))
				if ret == jetstream.LimitsPolicy {
					if after != capacity || errAfterAck == nil {
						t.Errorf("limits: ack freed a slot (stored %d)", after)
					}
					err := s.DeleteMsg(ctx, seq(t, m))
					_, errAfterDelete := publish(t, ctx, b.js, subj(q, "c"))
					t.Logf("limits: DeleteMsg(%d): %s; stored %d; publish to c: %s", seq(t, m), describe(err), msgs(t, ctx, s), describe(errAfterDelete))
					if errAfterDelete != nil {
						t.Error("delete did not free a slot")
					}
				} else if after != capacity-1 || errAfterAck != nil {
					t.Errorf("%s: ack did not free a slot (stored %d)", ret, after)
				}
			})
		}
	})
}

// Q2: an interest stream without consumers keeps nothing.
func TestInterestWithoutConsumer(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, b backend) {
		s := mustStream(t, ctx, b.js, backlogConfig("interest0", jetstream.InterestPolicy))
		_, err := publish(t, ctx, b.js, subj("interest0", "a"))
		n := msgs(t, ctx, s)
		t.Logf("interest stream, no consumer: publish %s, stored %d", describe(err), n)
	})
}

func fetchOne(t *testing.T, c jetstream.Consumer, wait time.Duration) jetstream.Msg {
	t.Helper()
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("fetch: %s", describe(err))
	}
	var got jetstream.Msg
	for m := range batch.Messages() {
		got = m
	}
	if err := batch.Error(); err != nil {
		t.Logf("fetch batch error: %s", describe(err))
	}
	return got
}

func seq(t *testing.T, m jetstream.Msg) uint64 {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.Sequence.Stream
}

func label(t *testing.T, m jetstream.Msg) string {
	t.Helper()
	if m == nil {
		return "none"
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s(seq=%d delivered=%d)", string(m.Data()), md.Sequence.Stream, md.NumDelivered)
}

func pub(t *testing.T, ctx context.Context, js jetstream.JetStream, subject, body string) {
	t.Helper()
	if _, err := js.Publish(ctx, subject, []byte(body)); err != nil {
		t.Fatalf("publish %s: %s", subject, describe(err))
	}
}

// Q3: consumer layout on a work-queue stream.
func TestWorkQueueConsumers(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, b backend) {
		q := "wqc"
		s := mustStream(t, ctx, b.js, backlogConfig(q, jetstream.WorkQueuePolicy))
		pub(t, ctx, b.js, subj(q, "a"), "a1")
		pub(t, ctx, b.js, subj(q, "b"), "b1")
		pub(t, ctx, b.js, subj(q, "a"), "a2")

		try := func(cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
			c, err := s.CreateOrUpdateConsumer(ctx, cfg)
			t.Logf("consumer %s filter=%q filters=%q: %s", cfg.Durable, cfg.FilterSubject, cfg.FilterSubjects, describe(err))
			return c, err
		}
		ka, errA := try(jetstream.ConsumerConfig{Durable: "ka", FilterSubject: subj(q, "a"), AckPolicy: jetstream.AckExplicitPolicy})
		_, errB := try(jetstream.ConsumerConfig{Durable: "kb", FilterSubject: subj(q, "b"), AckPolicy: jetstream.AckExplicitPolicy})
		if errA != nil || errB != nil {
			t.Fatal("non-overlapping per-key consumers refused")
		}
		if _, err := try(jetstream.ConsumerConfig{Durable: "all", FilterSubject: "spillway.backlog." + q + ".*", AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
			t.Error("overlapping consumer accepted on a work-queue stream")
		}
		if _, err := try(jetstream.ConsumerConfig{Durable: "nofilter", AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
			t.Error("unfiltered second consumer accepted on a work-queue stream")
		}
		_, _ = try(jetstream.ConsumerConfig{Durable: "multi", FilterSubjects: []string{subj(q, "c"), subj(q, "d")}, AckPolicy: jetstream.AckExplicitPolicy})
		_, _ = try(jetstream.ConsumerConfig{Durable: "multiov", FilterSubjects: []string{subj(q, "a"), subj(q, "e")}, AckPolicy: jetstream.AckExplicitPolicy})

		// Head of key a without a consumer: first message with subject a at seq >= 1.
		head, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj(q, "a")))
		if err != nil {
			t.Errorf("GetMsg next_by_subj: %s", describe(err))
		} else {
			t.Logf("GetMsg(1, subject a) -> seq %d %q", head.Sequence, head.Data)
		}

		// Per-key FIFO through consumer ka.
		var order []string
		for range 2 {
			m := fetchOne(t, ka, time.Second)
			order = append(order, label(t, m))
			if m != nil {
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("consumer ka delivered %v; stored after acks %d", order, msgs(t, ctx, s))
		if !strings.HasPrefix(order[0], "a1") || !strings.HasPrefix(order[1], "a2") {
			t.Errorf("per-key order %v", order)
		}
	})
}

// Q3: MaxAckPending, NakWithDelay, AckWait and InProgress on one consumer over all keys
// and on one consumer per key.
func TestAckSemantics(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, b backend) {
		setup := func(t *testing.T, q string, cfg jetstream.ConsumerConfig) jetstream.Consumer {
			s := mustStream(t, ctx, b.js, backlogConfig(q, jetstream.WorkQueuePolicy))
			cfg.AckPolicy = jetstream.AckExplicitPolicy
			if cfg.FilterSubject == "" && len(cfg.FilterSubjects) == 0 {
				cfg.FilterSubject = "spillway.backlog." + q + ".*"
			}
			c, err := s.CreateOrUpdateConsumer(ctx, cfg)
			if err != nil {
				t.Fatalf("consumer: %s", describe(err))
			}
			return c
		}

		t.Run("MaxAckPending1", func(t *testing.T) {
			q := "map1"
			c := setup(t, q, jetstream.ConsumerConfig{Durable: "w", MaxAckPending: 1})
			pub(t, ctx, b.js, subj(q, "a"), "a1")
			pub(t, ctx, b.js, subj(q, "b"), "b1")
			m1 := fetchOne(t, c, time.Second)
			m2 := fetchOne(t, c, 500*time.Millisecond)
			t.Logf("MaxAckPending=1: first fetch %s, second fetch while unacked %s", label(t, m1), label(t, m2))
			if m2 != nil {
				t.Error("MaxAckPending=1 delivered a second message")
			}
			if err := m1.Ack(); err != nil {
				t.Fatal(err)
			}
			t.Logf("after ack: %s", label(t, fetchOne(t, c, time.Second)))
		})

		t.Run("NakWithDelaySharedConsumer", func(t *testing.T) {
			for _, mapn := range []int{1, 100} {
				q := fmt.Sprintf("nak%d", mapn)
				c := setup(t, q, jetstream.ConsumerConfig{Durable: "w", MaxAckPending: mapn})
				pub(t, ctx, b.js, subj(q, "a"), "a1")
				pub(t, ctx, b.js, subj(q, "a"), "a2")
				pub(t, ctx, b.js, subj(q, "b"), "b1")
				m := fetchOne(t, c, time.Second)
				start := time.Now()
				if err := m.NakWithDelay(1500 * time.Millisecond); err != nil {
					t.Fatal(err)
				}
				var seen []string
				for time.Since(start) < 3*time.Second && len(seen) < 3 {
					n := fetchOne(t, c, 500*time.Millisecond)
					if n == nil {
						continue
					}
					seen = append(seen, fmt.Sprintf("%s@%dms", label(t, n), time.Since(start).Milliseconds()))
					if err := n.Ack(); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("MaxAckPending=%d: fetched %s, NakWithDelay(1.5s); then delivered %v", mapn, label(t, m), seen)
			}
		})

		t.Run("NakWithDelayConsumerPerKey", func(t *testing.T) {
			q := "perkey"
			s := mustStream(t, ctx, b.js, backlogConfig(q, jetstream.WorkQueuePolicy))
			var cons [2]jetstream.Consumer
			for i, k := range []string{"a", "b"} {
				c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "k" + k, FilterSubject: subj(q, k), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
				if err != nil {
					t.Fatal(err)
				}
				cons[i] = c
			}
			pub(t, ctx, b.js, subj(q, "a"), "a1")
			pub(t, ctx, b.js, subj(q, "a"), "a2")
			pub(t, ctx, b.js, subj(q, "b"), "b1")
			m := fetchOne(t, cons[0], time.Second)
			start := time.Now()
			if err := m.NakWithDelay(1500 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			nb := fetchOne(t, cons[1], time.Second)
			bAt := time.Since(start)
			na := fetchOne(t, cons[0], 500*time.Millisecond)
			t.Logf("per-key consumers, MaxAckPending=1: ka fetched %s and NakWithDelay(1.5s); kb then got %s after %dms; ka meanwhile got %s",
				label(t, m), label(t, nb), bAt.Milliseconds(), label(t, na))
			if nb == nil || na != nil {
				t.Error("per-key consumer layout: B held back or A2 overtook A1")
			}
			var seen []string
			for time.Since(start) < 3*time.Second && len(seen) < 2 {
				n := fetchOne(t, cons[0], 500*time.Millisecond)
				if n == nil {
					continue
				}
				seen = append(seen, fmt.Sprintf("%s@%dms", label(t, n), time.Since(start).Milliseconds()))
				if err := n.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("ka then delivered %v", seen)
		})

		t.Run("MultiFilterMaxAckPending1", func(t *testing.T) {
			q := "multi"
			s := mustStream(t, ctx, b.js, backlogConfig(q, jetstream.WorkQueuePolicy))
			c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "ab", FilterSubjects: []string{subj(q, "a"), subj(q, "b")}, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
			if err != nil {
				// Before 2.10 the server ignores filter_subjects; nats.go notices, but the
				// consumer it asked for already exists, unfiltered.
				info, ierr := s.Consumer(ctx, "ab")
				if ierr == nil {
					ci := info.CachedInfo().Config
					t.Logf("FilterSubjects consumer: %s; left on the server as filter=%q filters=%q", describe(err), ci.FilterSubject, ci.FilterSubjects)
				} else {
					t.Logf("FilterSubjects consumer: %s; lookup: %s", describe(err), describe(ierr))
				}
				return
			}
			pub(t, ctx, b.js, subj(q, "a"), "a1")
			pub(t, ctx, b.js, subj(q, "b"), "b1")
			m := fetchOne(t, c, time.Second)
			if err := m.NakWithDelay(1500 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			n := fetchOne(t, c, 500*time.Millisecond)
			t.Logf("FilterSubjects [a b], MaxAckPending=1: fetched %s, NakWithDelay(1.5s); next fetch within 500ms: %s", label(t, m), label(t, n))
		})

		t.Run("ManyPerKeyConsumers", func(t *testing.T) {
			q := "many"
			s := mustStream(t, ctx, b.js, backlogConfig(q, jetstream.WorkQueuePolicy))
			const n = 200
			start := time.Now()
			for i := range n {
				k := fmt.Sprintf("k%d", i)
				if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: k, FilterSubject: subj(q, k), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}); err != nil {
					t.Fatalf("consumer %d: %s", i, describe(err))
				}
			}
			t.Logf("created %d per-key durable consumers in %s", n, time.Since(start).Round(time.Millisecond))
		})

		t.Run("AckWaitAndInProgress", func(t *testing.T) {
			q := "ackwait"
			c := setup(t, q, jetstream.ConsumerConfig{Durable: "w", AckWait: time.Second})
			pub(t, ctx, b.js, subj(q, "a"), "a1")
			m := fetchOne(t, c, time.Second)
			start := time.Now()
			for time.Since(start) < 2500*time.Millisecond {
				time.Sleep(400 * time.Millisecond)
				if err := m.InProgress(); err != nil {
					t.Fatal(err)
				}
			}
			during := fetchOne(t, c, 300*time.Millisecond)
			t.Logf("AckWait=1s: fetched %s, InProgress every 400ms for 2.5s; fetch then: %s", label(t, m), label(t, during))
			if during != nil {
				t.Error("redelivered despite InProgress")
			}
			stopped := time.Now()
			re := fetchOne(t, c, 3*time.Second)
			t.Logf("after InProgress stopped: redelivered %s after %dms", label(t, re), time.Since(stopped).Milliseconds())
			if re == nil {
				t.Error("no redelivery after AckWait")
			}
		})
	})
}

// Q4: Nats-Msg-Id deduplication.
func TestDedup(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, b backend) {
		q := "dedup"
		s := mustStream(t, ctx, b.js, backlogConfig(q, jetstream.WorkQueuePolicy))
		for range 5 {
			if _, err := publish(t, ctx, b.js, subj(q, "a"), jetstream.WithMsgID("job-1")); err != nil {
				t.Fatal(err)
			}
		}
		n := msgs(t, ctx, s)
		t.Logf("same Nats-Msg-Id 5 times: stored %d", n)
		if n != 1 {
			t.Errorf("stored %d, want 1", n)
		}
		// Fill key a (per-key limit) and then the stream; retry job-1 once full.
		for i := range 2 {
			if _, err := publish(t, ctx, b.js, subj(q, "a"), jetstream.WithMsgID(fmt.Sprintf("job-a%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		_, err := publish(t, ctx, b.js, subj(q, "a"), jetstream.WithMsgID("job-1"))
		t.Logf("retry of stored job-1 while key a is full: %s", describe(err))
		for i := range 2 {
			if _, err := publish(t, ctx, b.js, subj(q, "b"), jetstream.WithMsgID(fmt.Sprintf("job-b%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		_, err = publish(t, ctx, b.js, subj(q, "b"), jetstream.WithMsgID("job-b0"))
		t.Logf("retry of stored job-b0 while stream is full: %s", describe(err))
		// After job-1 is consumed (removed by the work-queue ack), retry it again.
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", FilterSubject: subj(q, "a"), AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		m := fetchOne(t, c, time.Second)
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = publish(t, ctx, b.js, subj(q, "a"), jetstream.WithMsgID("job-1"))
		t.Logf("retry of job-1 after it was acked and removed (within Duplicates window): %s; stored %d", describe(err), msgs(t, ctx, s))
	})
}
