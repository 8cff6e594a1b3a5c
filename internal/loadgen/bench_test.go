package loadgen

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The cost of one submission on the load generator's side, against
// stand-ins that answer at once: what the driver adds to a benchmark.
func BenchmarkSubmitTarget(b *testing.B) {
	reply, _ := json.Marshal(spillway.SubmitReply{ID: "01a21b35-401d-7273-a3c6-cc51d2922ed1", Queue: "demo", Status: spillway.Admitted})
	opts := []client.Option{client.WithRetries(0, 0), client.WithoutIdempotencyKeys(), client.WithTimeout(5 * time.Second)}
	payload := make([]byte, 128)
	b.Run("http", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(reply)
		}))
		b.Cleanup(srv.Close)
		c, err := client.NewHTTP(srv.URL, append(opts, client.WithHTTPClient(srv.Client()))...)
		if err != nil {
			b.Fatal(err)
		}
		t := &SubmitTarget{Client: c, Queue: "demo", KeyHeader: "X-Client-Id", Payload: payload, Options: []client.SubmitOption{client.WithCost(1)}}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if o := t.Submit(b.Context(), Request{Seq: int64(i), Key: "k"}); o.Verdict != Admitted {
				b.Fatal(o)
			}
		}
	})
	b.Run("nats", func(b *testing.B) {
		ns := queuetest.Start(b)
		nc := ns.Connect(b)
		sub, err := nc.Subscribe(spillway.SubmitPrefix+"demo", func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Header.Set(spillway.HeaderStatus, "admitted")
			r.Data = reply
			_ = m.RespondMsg(r)
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Unsubscribe() })
		c, err := client.NewNATS(ns.Connect(b), opts...)
		if err != nil {
			b.Fatal(err)
		}
		t := &SubmitTarget{Client: c, Queue: "demo", KeyHeader: "X-Client-Id", Payload: payload, Options: []client.SubmitOption{client.WithCost(1)}}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if o := t.Submit(b.Context(), Request{Seq: int64(i), Key: "k"}); o.Verdict != Admitted {
				b.Fatal(o)
			}
		}
	})
}
