package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		subject, reply string
		header         nats.Header
		data           string
		want           string
	}{
		{"$JS.API.CONSUMER.MSG.NEXT.SPILLWAY_q_READY.spillway-ready", "_INBOX.x", nil, `{"batch":64}`, "pull SPILLWAY_q_READY"},
		{"$JS.ACK.SPILLWAY_q_READY.spillway-ready.1.2.3.4.5", "_INBOX.y", nil, "+ACK", "ack SPILLWAY_q_READY +ACK double"},
		{"$JS.ACK.SPILLWAY_q_READY.spillway-ready.1.2.3.4.5", "", nil, "", "ack SPILLWAY_q_READY +ACK"},
		{"$JS.ACK.SPILLWAY_q_READY.spillway-ready.1.2.3.4.5", "", nil, `-NAK {"delay":1000}`, "ack SPILLWAY_q_READY -NAK"},
		{"$JS.ACK.SPILLWAY_q_READY.spillway-ready.1.2.3.4.5", "", nil, "+WPI", "ack SPILLWAY_q_READY +WPI"},
		{"$KV.spillway-jobs-07.0190", "_INBOX.z", nil, "{}", "kv put spillway-jobs-NN"},
		{"$KV.spillway-jobs-07.0190", "_INBOX.z", nats.Header{nats.ExpectedLastSubjSeqHdr: {"0"}}, "{}", "kv create spillway-jobs-NN"},
		{"$KV.spillway-jobs-07.0190", "_INBOX.z", nats.Header{nats.ExpectedLastSubjSeqHdr: {"12"}}, "{}", "kv update spillway-jobs-NN"},
		{"$KV.pacers.q", "", nats.Header{"KV-Operation": {"DEL"}}, "", "kv delete pacers"},
		{"$JS.API.DIRECT.GET.KV_spillway-jobs-11.$KV.spillway-jobs-11.0190", "_INBOX.z", nil, "", "kv get KV_spillway-jobs-NN"},
		{"$JS.API.DIRECT.GET.KV_spillway-jobs-11", "_INBOX.z", nil, `{"last_by_subj":"x"}`, "kv get KV_spillway-jobs-NN"},
		{"$JS.API.STREAM.MSG.GET.KV_pacers", "_INBOX.z", nil, "", "msg get KV_pacers"},
		{"$JS.API.CONSUMER.INFO.SPILLWAY_q_READY.spillway-ready", "_INBOX.z", nil, "", "api CONSUMER.INFO SPILLWAY_q_READY"},
		{"$JS.API.CONSUMER.DURABLE.CREATE.SPILLWAY_q_READY.spillway-ready", "_INBOX.z", nil, "", "api CONSUMER.DURABLE.CREATE SPILLWAY_q_READY"},
		{"$JS.API.STREAM.MSG.DELETE.SPILLWAY_q_BACKLOG", "_INBOX.z", nil, "", "api STREAM.MSG.DELETE SPILLWAY_q_BACKLOG"},
		{"$JS.API.STREAM.INFO.KV_spillway-jobs-03", "_INBOX.z", nil, "", "api STREAM.INFO KV_spillway-jobs-NN"},
		{"$JS.API.INFO", "_INBOX.z", nil, "", "api INFO"},
		{"$JS.FC.SPILLWAY_q_READY.x.1", "", nil, "", "flow control"},
		{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C", "", nil, "", "advisory ADVISORY.CONSUMER.MAX_DELIVERIES"},
		{"$JS.EVENT.ADVISORY.API", "", nil, "", "advisory ADVISORY.API"},
		{"spillway.ready.q.abcdefghijklmnopqrstuvwxyz", "$JS.ACK.SPILLWAY_q_READY.spillway-ready.1.2.3.4.5", nil, "job", "delivered SPILLWAY_q_READY"},
		{"_SPILLWAY_INBOX.worker.abc", "", nats.Header{"Status": {"408"}}, "", "to inbox: status 408"},
		{"_INBOX.abc.2", "", nil, `{"stream":"S","seq":1}`, "to inbox: reply"},
		{"spillway.ready.q.abcdefghijklmnopqrstuvwxyz", "_INBOX.z", nil, "job", "publish spillway.ready.q.*"},
		{"solo", "", nil, "", "publish solo.*"},
	} {
		if got := kindOf(tc.subject, tc.reply, tc.header, []byte(tc.data)); got != tc.want {
			t.Errorf("kindOf(%q, %q, %v, %q) = %q, want %q", tc.subject, tc.reply, tc.header, tc.data, got, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the tap's writes and the test's
// reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The tap sees a client's stream publishes, KV puts and gets, JetStream
// API requests, pull requests, double acks and the jobs delivered.
func TestTapCountsJetStreamTraffic(t *testing.T) {
	srv := queuetest.Start(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tctx, stop := context.WithCancel(ctx)
	var out bytes.Buffer
	var errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(tctx, []string{"--nats", srv.URL()}, &out, &errOut) }()
	for !strings.Contains(errOut.String(), "natstap ready") {
		select {
		case err := <-done:
			t.Fatalf("natstap: %v: %s", err, errOut.String())
		case <-ctx.Done():
			t.Fatal("natstap is not ready")
		case <-time.After(10 * time.Millisecond):
		}
	}

	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "jobs.a", []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "status-01", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("natstap: %v", err)
	}
	var counts map[string]int64
	if err := json.Unmarshal(out.Bytes(), &counts); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	for kind, want := range map[string]int64{
		"publish jobs.*":                 3,
		"api STREAM.CREATE JOBS":         1,
		"pull JOBS":                      1,
		"delivered JOBS":                 3,
		"ack JOBS +ACK double":           3,
		"kv put status-NN":               1,
		"kv get KV_status-NN":            1,
		"api STREAM.CREATE KV_status-NN": 1,
	} {
		if counts[kind] != want {
			t.Errorf("%s: %d, want %d (all counts: %v)", kind, counts[kind], want, counts)
		}
	}
}
