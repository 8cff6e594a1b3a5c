package queuetest

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// laggingPrefix is the API prefix of LaggingDirect's contexts: their
// requests come to the test's relay, not to the server.
const laggingPrefix = "LAGGING.API."

// LaggingDirect is a JetStream context whose direct gets on stream are all
// answered "no such message", as a replica that lags behind the stream's
// leader may answer for a message stored already; every other JetStream API
// request (a stream message get, which the leader answers, among them)
// reaches the server. It tells how many direct gets it answered so. A test
// of a reader that must not act on a lagging replica's word runs it on such
// a context.
func (c clients) LaggingDirect(tb testing.TB, stream string) (jetstream.JetStream, *atomic.Int64) {
	tb.Helper()
	relay := c.Connect(tb)
	var lied atomic.Int64
	direct := laggingPrefix + "DIRECT.GET." + stream
	if _, err := relay.Subscribe(laggingPrefix+">", func(m *nats.Msg) {
		if m.Subject == direct || strings.HasPrefix(m.Subject, direct+".") {
			lied.Add(1)
			no := nats.NewMsg(m.Reply)
			no.Header.Set("Status", "404")
			no.Header.Set("Description", "Message Not Found")
			_ = relay.PublishMsg(no)
			return
		}
		// The server answers the requester itself: a pull's messages go
		// to the puller's inbox as they come. A key-value write under the
		// prefix ($KV.<bucket>.<key>) goes to its own subject.
		to := strings.TrimPrefix(m.Subject, laggingPrefix)
		if !strings.HasPrefix(to, "$") {
			to = "$JS.API." + to
		}
		_ = relay.PublishMsg(&nats.Msg{Subject: to, Reply: m.Reply, Header: m.Header, Data: m.Data})
	}); err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	if err := relay.Flush(); err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	js, err := jetstream.NewWithAPIPrefix(c.Connect(tb), strings.TrimSuffix(laggingPrefix, "."))
	if err != nil {
		tb.Fatalf("queuetest: %v", err)
	}
	return js, &lied
}
