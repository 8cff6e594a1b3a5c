package door_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// natsMsg is a submission to q with headers (name, value, …) set exactly
// as spelled: nats.Header keeps the case it is given.
func natsMsg(q string, data []byte, header ...string) *nats.Msg {
	m := &nats.Msg{Subject: spillway.SubmitPrefix + q, Data: data, Header: nats.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		m.Header[header[i]] = append(m.Header[header[i]], header[i+1])
	}
	return m
}

// ask sends a plain nats.go request and returns the decoded reply.
func ask(t *testing.T, nc *nats.Conn, m *nats.Msg) spillway.SubmitReply {
	t.Helper()
	resp, err := apitest.Request(t, nc, m, 10*time.Second)
	if err != nil {
		t.Fatalf("request to %s: %v", m.Subject, err)
	}
	var rep spillway.SubmitReply
	if err := json.Unmarshal(resp.Data, &rep); err != nil {
		t.Fatalf("reply %q: %v", resp.Data, err)
	}
	if got := resp.Header.Get(spillway.HeaderStatus); got != string(rep.Status) || got == "" {
		t.Errorf("reply header %s %q, body status %q", spillway.HeaderStatus, got, rep.Status)
	}
	return rep
}

func TestNATSSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	nc := b.nats.Connect(t)
	rep := ask(t, nc, natsMsg("q", []byte("over nats"), "X-Client", "c"))
	if rep.Status != spillway.Admitted || rep.Queue != "q" || rep.ID == "" || rep.Duplicate || rep.Error != "" || rep.Type != "" {
		t.Errorf("admitted: %+v", rep)
	}
	if j, ok := b.jobOfKey(t, "q", queue.Ready, "c"); !ok || j.ID != rep.ID || string(j.Payload) != "over nats" {
		t.Errorf("the stored job: %+v (found %v), want %s with the payload", j, ok, rep.ID)
	}
	rep = ask(t, nc, natsMsg("q", nil, "X-Client", "c"))
	if rep.Status != spillway.Queued || rep.ID == "" || rep.NotBefore == nil || rep.Position < 1 || rep.EstimatedStart == nil {
		t.Errorf("queued: %+v", rep)
	}
	ask(t, nc, natsMsg("q", nil, "X-Client", "c"))
	rep = ask(t, nc, natsMsg("q", nil, "X-Client", "c"))
	if rep.Status != spillway.Rejected || rep.ID != "" || rep.Type != spillway.ProblemRateLimited || rep.RetryAfterMS <= 59_000 || rep.RetryAfterMS > 60_000 {
		t.Errorf("rejected: %+v, want rate-limited with retry_after_ms just under 60000", rep)
	}
}

func TestNATSErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	nc := b.nats.Connect(t)
	for _, c := range []struct {
		name, q string
		header  []string
		want    string
	}{
		{"cost 0", "q", []string{spillway.HeaderCost, "0"}, spillway.ProblemBadCost},
		{"cost -1", "q", []string{spillway.HeaderCost, "-1"}, spillway.ProblemBadCost},
		{"cost abc", "q", []string{spillway.HeaderCost, "abc"}, spillway.ProblemBadCost},
		{"cost huge", "q", []string{spillway.HeaderCost, "99999999999999999999"}, spillway.ProblemBadCost},
		{"cost over the limit", "q", []string{"X-Client", "c", spillway.HeaderCost, "4"}, spillway.ProblemBadCost}, // a key's limit (its override's, if any) bounds its cost
		{"unknown queue", "nope", nil, spillway.ProblemNotFound},
		{"key too long", "q", []string{"X-Client", strings.Repeat("k", admit.MaxKeyLen+1)}, spillway.ProblemBadKey},
		{"idempotency key too long", "q", []string{"X-Client", "c", spillway.HeaderIdempotencyKey, strings.Repeat("i", admit.MaxIdempotencyKeyLen+1)}, spillway.ProblemBadRequest},
		{"key header missing", "q", nil, spillway.ProblemBadKey},
	} {
		rep := ask(t, nc, natsMsg(c.q, nil, c.header...))
		if rep.Status != spillway.Failed || rep.Type != c.want || rep.Error == "" || rep.ID != "" || rep.Queue != c.q {
			t.Errorf("%s: %+v, want status error, type %s, an error message", c.name, rep, c.want)
		}
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 0 {
		t.Errorf("%d jobs stored, want none", n)
	}
}

// TestNATSHeadersAnyCase: producers spell header names as they like.
func TestNATSHeadersAnyCase(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	nc := b.nats.Connect(t)
	if rep := ask(t, nc, natsMsg("q", nil, "spillway-cost", "0")); rep.Type != spillway.ProblemBadCost {
		t.Errorf("spillway-cost: 0: %+v, want bad-cost (the header read)", rep)
	}
	if rep := ask(t, nc, natsMsg("q", nil, "SPILLWAY-COST", "abc")); rep.Type != spillway.ProblemBadCost {
		t.Errorf("SPILLWAY-COST: abc: %+v, want bad-cost", rep)
	}
	rep := ask(t, nc, natsMsg("q", nil, "x-client", "lower", "idempotency-key", "k1"))
	if j, ok := b.jobOfKey(t, "q", queue.Ready, "lower"); !ok || j.ID != rep.ID {
		t.Errorf("x-client: lower: the job is not keyed by it (%+v, found %v)", j, ok)
	}
	if again := ask(t, nc, natsMsg("q", nil, "X-CLIENT", "lower", "IDEMPOTENCY-KEY", "k1")); !again.Duplicate || again.ID != rep.ID {
		t.Errorf("IDEMPOTENCY-KEY: k1 again: %+v, want a duplicate of %s", again, rep.ID)
	}
	// Cost 2 spelt in lower case: key "two" takes 2 units (e' = 1 > delay 0: queued).
	if rep := ask(t, nc, natsMsg("q", nil, "x-client", "two", "spillway-cost", "2")); rep.Status != spillway.Queued {
		t.Errorf("a cost of 2 in lower case: %+v, want queued", rep)
	}
}

// TestNATSIdempotency: Nats-Msg-Id is an idempotency key, in the same
// space as HTTP's Idempotency-Key.
func TestNATSIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	nc := b.nats.Connect(t)
	first := ask(t, nc, natsMsg("q", nil, "X-Client", "c", spillway.HeaderMsgID, "m-1"))
	again := ask(t, nc, natsMsg("q", nil, "X-Client", "c", spillway.HeaderMsgID, "m-1"))
	if first.Status != spillway.Admitted || first.Duplicate || !again.Duplicate || again.ID != first.ID || again.Status != spillway.Admitted {
		t.Errorf("Nats-Msg-Id twice: %+v then %+v; want the second a duplicate of the first", first, again)
	}
	// Across doors.
	r := b.post(t, "q", nil, "X-Client", "c", spillway.HeaderIdempotencyKey, "m-1")
	if r.code != 202 || !r.reply.Duplicate || r.reply.ID != first.ID || r.header.Get("Location") != "/v1/jobs/"+first.ID {
		t.Errorf("the same key as HTTP's Idempotency-Key: %d %s, want 202, a duplicate of %s", r.code, r.body, first.ID)
	}
	h := b.post(t, "q", nil, "X-Client", "d", spillway.HeaderIdempotencyKey, "h-1")
	if n := ask(t, nc, natsMsg("q", nil, "X-Client", "d", spillway.HeaderIdempotencyKey, "h-1")); !n.Duplicate || n.ID != h.reply.ID {
		t.Errorf("an HTTP key retried over NATS: %+v, want a duplicate of %s", n, h.reply.ID)
	}
	if n := b.msgs(t, "q", queue.Ready); n != 2 {
		t.Errorf("READY holds %d jobs, want 2", n)
	}
}

// TestNATSPublishIsIgnored: a message without a reply subject is not a
// submission: nobody would learn its fate.
func TestNATSPublishIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	nc := b.nats.Connect(t)
	if err := nc.PublishMsg(natsMsg("q", []byte("fire and forget"), "X-Client", "p")); err != nil {
		t.Fatal(err)
	}
	rep := ask(t, nc, natsMsg("q", nil, "X-Client", "r"))
	b.stopNATS(t) // every message received is handled by now
	if n := b.msgs(t, "q", queue.Ready); n != 1 || rep.Status != spillway.Admitted {
		t.Errorf("READY holds %d jobs after a publish and a request (%+v), want the request's only", n, rep)
	}
	if _, ok := b.jobOfKey(t, "q", queue.Ready, "p"); ok {
		t.Error("the published message was stored as a job")
	}
}

// TestNATSHostileKeys: any header value is a key; none reaches a subject.
func TestNATSHostileKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, hostileConfig, setupOptions{})
	nc := b.nats.Connect(t)
	// (Header values are trimmed in transit, so a key of blanks only is
	// the empty key: only inner blanks are tried.)
	keys := []string{".", "*", ">", "a.*.>", "a b", "\x00", "a\x00b", "\xff\xfe", "a\tb"}
	for _, k := range keys {
		for _, want := range []spillway.Status{spillway.Admitted, spillway.Queued} {
			if rep := ask(t, nc, natsMsg("q", nil, "X-Client", k)); rep.Status != want {
				t.Fatalf("key %q: %+v, want %s", k, rep, want)
			}
		}
	}
	checkSubjects(t, b, keys)
}

// TestNATSStopDrains: Stop answers every request received before it —
// those being decided, the one waiting for a slot and those still in the
// subscription's buffer — before it returns, and takes no new ones.
func TestNATSStopDrains(t *testing.T) {
	t.Parallel()
	gate := admittest.NewGateStore(t)
	store, err := admit.NewFailover(gate, config.FailClosed)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, `
queues:
  - name: q
    limits: [{key: global, algorithm: token_bucket, rate: 1/s, burst: 100000}]
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{store: store})
	b.stopNATS(t)
	// A door of its own connection, closed right after Stop: a reply not
	// sent by then is lost.
	doorConn := b.nats.Connect(t)
	d := door.NewNATS(doorConn, b.admitter, nil)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}

	producer := b.nats.Connect(t)
	n := door.MaxConcurrentNATS + 16
	replies := make(chan *nats.Msg, n)
	sub, err := producer.ChanSubscribe("_INBOX.drain.*", replies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for i := range n {
		m := natsMsg("q", []byte(strconv.Itoa(i)))
		m.Reply = "_INBOX.drain." + strconv.Itoa(i)
		if err := producer.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := producer.Flush(); err != nil { // all routed to the door's connection
		t.Fatal(err)
	}
	gate.WaitArrived(t, door.MaxConcurrentNATS, 30*time.Second) // as many as the door works on at once

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- d.Stop(ctx)
	}()
	// Draining: a new request finds no admitter. (The probe names no
	// queue, so it takes no decision if it reaches the door before the
	// door unsubscribes; it then waits behind the held ones: a short
	// timeout, and try again.)
	admittest.WaitFor(t, 10*time.Second, "requests to find no responders", func() bool {
		_, err := producer.Request(spillway.SubmitPrefix+"no-such-queue", nil, 200*time.Millisecond)
		return errors.Is(err, nats.ErrNoResponders)
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while %d submissions were held mid-decision", err, gate.Entered())
	default:
	}
	gate.Release()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return within 30s of the decisions going on")
	}
	doorConn.Close()

	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case m := <-replies:
			var rep spillway.SubmitReply
			if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Status != spillway.Admitted {
				t.Fatalf("reply on %s: %s (%v), want admitted", m.Subject, m.Data, err)
			}
			got[m.Subject] = true
		case <-deadline:
			t.Fatalf("%d of %d requests received before Stop were answered", len(got), n)
		}
	}
	if c := gate.Entered(); c != int64(n) {
		t.Errorf("%d decisions, want %d", c, n)
	}
	if m := b.msgs(t, "q", queue.Ready); m != uint64(n) {
		t.Errorf("READY holds %d jobs, want %d", m, n)
	}
}

// TestNATSInflightBound: the NATS door answers at most
// http.max_inflight_bytes of request bodies at once, as the HTTP door
// reads them; requests beyond wait in the subscription's buffer, bounded
// in bytes by the same setting, and past it are dropped as a slow
// consumer (the producer's request times out; nothing is stored) rather
// than held: every request is answered or dropped, and what the door held
// never passed the bound.
func TestNATSInflightBound(t *testing.T) {
	t.Parallel()
	const bound, size, n = 5000, 1000, 200
	b := setup(t, `
http: {max_inflight_bytes: `+strconv.Itoa(bound)+`}
queues:
  - name: q
    limits:
      - {key: global, algorithm: token_bucket, rate: 1/m, burst: 1}
    backlog: {capacity: 1, leak_rate: 1/m}
`, setupOptions{})
	nc := b.nats.Connect(t)
	replies := make(chan *nats.Msg, n)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	payload := []byte(strings.Repeat("x", size))
	for range n {
		if err := nc.PublishMsg(&nats.Msg{Subject: spillway.SubmitPrefix + "q", Reply: inbox, Data: payload}); err != nil {
			t.Fatal(err)
		}
	}
	statuses := map[spillway.Status]int{}
	answered := 0
	for deadline := time.Now().Add(10 * time.Second); answered+door.NATSDropped(t, b.natsDoor) < n; {
		select {
		case m := <-replies:
			var rep spillway.SubmitReply
			if err := json.Unmarshal(m.Data, &rep); err != nil {
				t.Fatalf("reply %q: %v", m.Data, err)
			}
			statuses[rep.Status]++
			answered++
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d of %d requests answered, %d dropped (%v)", answered, n, door.NATSDropped(t, b.natsDoor), statuses)
		}
	}
	dropped := door.NATSDropped(t, b.natsDoor)
	peak, now := door.NATSInflight(b.natsDoor)
	t.Logf("%d requests of %d bytes at once: %d answered %v, %d dropped; at most %d bytes answered at once", n, size, answered, statuses, dropped, peak)
	if peak > bound || peak < size {
		t.Errorf("at most %d request bytes answered at once, want between %d and the bound %d", peak, size, bound)
	}
	if now != 0 {
		t.Errorf("%d request bytes held once every request was answered, want 0", now)
	}
	if dropped == 0 || answered < bound/size {
		t.Errorf("%d answered, %d dropped: want the bound's worth answered and the requests past the buffer dropped", answered, dropped)
	}
	if statuses[spillway.Admitted]+statuses[spillway.Queued] != 2 || statuses[spillway.Rejected] != answered-2 {
		t.Errorf("answers %v: want 1 admitted, 1 queued and the rest rejected", statuses)
	}
}
