package worker

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// GrantMsg is the grant the drain's leader would publish for the backlog
// job at seq, booked to start at start (tests only).
func GrantMsg(q string, seq uint64, start time.Time) *nats.Msg {
	m := nats.NewMsg(queue.GrantSubject(q))
	m.Header.Set(headerGrantSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(headerGrantStart, strconv.FormatInt(start.UnixNano(), 10))
	m.Header.Set(nats.MsgIdHdr, "grant:"+strconv.FormatUint(seq, 10))
	return m
}

// FeedConsumer is the consumer of the backlog the drain's leader follows
// it with (tests only).
const FeedConsumer = feedConsumer
