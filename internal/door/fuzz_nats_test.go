package door_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// fuzzNATSConfig: q keys on X-Client (a key's first job admitted, its
// second queued, the backlog takes one per key); g has one global tier.
const fuzzNATSConfig = `
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 2}]
    backlog: {capacity: 100000, per_key_capacity: 1, leak_rate: 1/s}
  - name: g
    limits: [{key: global, algorithm: token_bucket, rate: 1000/s, burst: 1000}]
    backlog: {capacity: 10, leak_rate: 1/s}
`

// fuzzProblems are the problem types a request's own content may earn:
// never internal, never unavailable while JetStream is up.
var fuzzProblems = map[string]bool{
	spillway.ProblemBadCost: true, spillway.ProblemBadKey: true, spillway.ProblemBadRequest: true,
	spillway.ProblemNotFound: true, spillway.ProblemTooLarge: true,
	spillway.ProblemRateLimited: true, spillway.ProblemQueueFull: true, spillway.ProblemKeyFull: true,
	spillway.ProblemIdempotencyMismatch: true, // a header block that changes a job its idempotency key named
}

// fuzzProducer speaks the NATS protocol itself over one TCP connection, so
// that a request's header block reaches the admitter byte for byte, as a
// hostile producer would send it — not as nats.go would encode it.
type fuzzProducer struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
}

func (p *fuzzProducer) dial() error {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", p.addr)
	if err != nil {
		return err
	}
	p.conn, p.r = c, bufio.NewReader(c)
	if _, err := fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1,\"name\":\"fuzz\"}\r\n"); err != nil {
		return err
	}
	accepted, err := p.ping()
	if err == nil && !accepted {
		err = fmt.Errorf("the server refused the connection")
	}
	return err
}

func (p *fuzzProducer) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// ping sends PING and reads up to PONG: true if the server took what was
// sent before it, false if it answered -ERR (and closes the connection).
func (p *fuzzProducer) ping() (bool, error) {
	if _, err := p.conn.Write([]byte("PING\r\n")); err != nil {
		return false, err
	}
	_ = p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := p.r.ReadString('\n')
		if err != nil {
			return false, err
		}
		switch {
		case strings.HasPrefix(line, "PONG"):
			return true, nil
		case strings.HasPrefix(line, "-ERR"):
			return false, nil
		case strings.HasPrefix(line, "PING"):
			if _, err := p.conn.Write([]byte("PONG\r\n")); err != nil {
				return false, err
			}
		}
	}
}

// send publishes one request; false if the server refused it.
func (p *fuzzProducer) send(subject, reply string, hdr, payload []byte) (bool, error) {
	if p.conn == nil {
		if err := p.dial(); err != nil {
			return false, err
		}
	}
	msg := fmt.Appendf(nil, "HPUB %s %s %d %d\r\n", subject, reply, len(hdr), len(hdr)+len(payload))
	msg = append(append(append(msg, hdr...), payload...), "\r\n"...)
	if _, err := p.conn.Write(msg); err != nil {
		p.close()
		return false, err
	}
	ok, err := p.ping()
	if !ok || err != nil {
		p.close()
	}
	return ok, err
}

func fuzzToken(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// FuzzNATSRequest sends requests to spillway.submit.<queue> whose header
// block is fuzzed — wrapped in a valid NATS/1.0 block, or (raw) sent as
// is, malformed ones included — to the NATS door of a real admitter on an
// embedded JetStream server. Every request the server passes on gets a
// reply: valid JSON with Spillway-Status equal to its status, an id when
// the job was taken, a problem type from the stable set when it was not
// (an unknown queue: not-found), never internal or unavailable. Every
// 500 requests, every subject in the queues' streams is a key token.
func FuzzNATSRequest(f *testing.F) {
	for _, s := range []struct {
		queue   string
		raw     bool
		hdr     string
		payload string
	}{
		{"q", false, "X-Client: alice", "job"},
		{"q", false, "X-Client: alice\r\nSpillway-Cost: 2\r\nIdempotency-Key: k1", ""},
		{"q", false, "x-client: a.b.*.>\r\nspillway-cost: 0", "x"},
		{"q", false, "X-Client: \xff\xfe\x00\r\nNats-Msg-Id: m", ""},
		{"q", false, "Spillway-Cost: 99999999999999999999", ""},
		{"q", false, "X-Client: " + strings.Repeat("k", admit.MaxKeyLen+1), ""},
		{"q", false, "Idempotency-Key: " + strings.Repeat("i", admit.MaxIdempotencyKeyLen+1), ""},
		{"q", false, "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nX-Client: t", "p"},
		{"q", false, "X-Client: a\r\nX-Client: b\r\nX-CLIENT: c", ""},
		{"g", false, "Spillway-Cost: 1000", ""},
		{"nope", false, "X-Client: a", ""},
		{"q", true, "NATS/1.0\r\nX-Client: raw\r\n\r\n", ""},
		{"q", true, "NATS/1.0 503\r\n\r\n", ""},
		{"q", true, "NATS/1.0\r\nno colon\r\n\r\n", ""},
		{"q", true, "HTTP/1.1\r\n\r\n", "x"},
		{"q", true, "NATS/1.0\r\nX-Client: unterminated", ""},
		{"q", true, "\r\n\r\n", ""},
	} {
		f.Add(s.queue, s.raw, []byte(s.hdr), []byte(s.payload))
	}

	srv := queuetest.Start(f)
	nc := srv.Connect(f)
	core := admittest.NewCore(f, nc, fuzzNATSConfig, nil)
	a, err := admit.New(core.Config, core.Options())
	if err != nil {
		f.Fatal(err)
	}
	d := door.NewNATS(nc, a, slog.New(slog.DiscardHandler))
	if err := d.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			f.Errorf("stopping the door: %v", err)
		}
	})
	replyConn := srv.Connect(f)
	replies := make(chan *nats.Msg, 16)
	sub, err := replyConn.ChanSubscribe("_INBOX.fuzzreply.*", replies)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := replyConn.Flush(); err != nil {
		f.Fatal(err)
	}
	p := &fuzzProducer{addr: strings.TrimPrefix(srv.URL(), "nats://")}
	f.Cleanup(p.close)
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, q string, raw bool, hdr, payload []byte) {
		if !fuzzToken(q) || len(hdr) > 64<<10 {
			t.Skip()
		}
		payload = payload[:min(len(payload), 1024)]
		if !raw {
			hdr = append(append([]byte("NATS/1.0\r\n"), hdr...), "\r\n\r\n"...)
		}
		if len(hdr) == 0 {
			t.Skip()
		}
		i := n.Add(1)
		reply := fmt.Sprintf("_INBOX.fuzzreply.%d", i)
		ok, err := p.send(spillway.SubmitPrefix+q, reply, hdr, payload)
		if err != nil {
			t.Fatalf("sending the request: %v", err)
		}
		if !ok {
			return // the server refused it: it reached no admitter
		}
		var m *nats.Msg
		for m == nil {
			select {
			case got := <-replies:
				if got.Subject == reply {
					m = got
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no reply within 10s to a request to %q with header block %q", q, hdr)
			}
		}
		var rep spillway.SubmitReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("reply %q: %v", m.Data, err)
		}
		if got := m.Header.Get(spillway.HeaderStatus); got != string(rep.Status) {
			t.Errorf("%s %q, body status %q", spillway.HeaderStatus, got, rep.Status)
		}
		switch rep.Status {
		case spillway.Admitted, spillway.Queued:
			if rep.ID == "" || rep.Type != "" || (q != "q" && q != "g") {
				t.Errorf("queue %q, header block %q: taken, but %+v", q, hdr, rep)
			}
		case spillway.Rejected, spillway.Failed:
			if !fuzzProblems[rep.Type] || rep.ID != "" {
				t.Errorf("queue %q, header block %q: %+v, want a problem type of the stable set", q, hdr, rep)
			}
			if rep.Status == spillway.Failed && rep.Error == "" {
				t.Errorf("queue %q: an error without a message: %+v", q, rep)
			}
		default:
			t.Errorf("queue %q, header block %q: status %q", q, hdr, rep.Status)
		}
		if q != "q" && q != "g" && rep.Type != spillway.ProblemNotFound {
			t.Errorf("unknown queue %q: %+v, want not-found", q, rep)
		}
		if i%500 == 0 {
			fuzzCheckSubjects(t, core, i)
		}
	})
}

// fuzzCheckSubjects checks that every subject of q's and g's streams is
// spillway.<ready|backlog>.<queue>.<key token>, then empties READY, which
// nothing drains here.
func fuzzCheckSubjects(t *testing.T, core *admittest.Core, i int64) {
	ctx := context.Background()
	for _, qn := range []string{"q", "g"} {
		for _, dest := range []queue.Destination{queue.Ready, queue.Backlog} {
			s, err := core.JS.Stream(ctx, queue.StreamName(qn, dest))
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, jetstreamSubjects())
			if err != nil {
				t.Fatal(err)
			}
			for subj := range info.State.Subjects {
				parts := strings.Split(subj, ".")
				// The backlog's subjects end with a key token, READY's with a job id.
				last := subjectToken
				if dest == queue.Ready {
					last = func(s string) bool { return jobstatus.ValidateID(s) == nil }
				}
				if len(parts) != 4 || parts[0] != "spillway" || parts[2] != qn || !last(parts[3]) {
					t.Errorf("after %d requests, stream %s holds subject %q: want spillway.<dest>.%s.<key token or, in READY, job id>", i, queue.StreamName(qn, dest), subj, qn)
				}
			}
			if dest == queue.Ready {
				if err := s.Purge(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
