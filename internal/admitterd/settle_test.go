package admitterd_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The admitter answers settle requests on the subject its jobs' charge
// names: ok for a good one (counted), permanent with an error naming the
// field for a bad one.
func TestSettleRequests(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	cfg := admittest.LoadConfig(t, fmt.Sprintf(`
nats: {url: %q}
http: {listen: "127.0.0.1:0"}
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: token_bucket, rate: 1/h, burst: 10}]
    backlog: {capacity: 10, leak_rate: 1/m}
`, srv.URL()))
	_, reg := start(t, cfg)
	nc := srv.Connect(t)
	sub := nats.NewMsg(spillway.SubmitPrefix + "q")
	sub.Header.Set("X-Client", "c")
	sub.Header.Set(spillway.HeaderCost, "5")
	r, err := nc.RequestMsg(sub, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply spillway.SubmitReply
	if err := json.Unmarshal(r.Data, &reply); err != nil || reply.Status != spillway.Admitted {
		t.Fatalf("submission: %s (%v), want admitted", r.Data, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := queue.FindReady(t.Context(), js, "q", reply.ID)
	if err != nil || m == nil {
		t.Fatalf("the job in READY: %v, %v", m, err)
	}
	charge := m.Header.Get(queue.HeaderCharge)
	route, _, _ := strings.Cut(charge, ";")
	settle := func(charge, actual string) *nats.Msg {
		t.Helper()
		req := nats.NewMsg(admit.SettlePrefix + route)
		req.Header.Set(spillway.HeaderQueue, "q")
		req.Header.Set(spillway.HeaderJobID, reply.ID)
		req.Header.Set(queue.HeaderCharge, charge)
		req.Header.Set(spillway.HeaderCostActual, actual)
		resp, err := nc.RequestMsg(req, 10*time.Second)
		if err != nil {
			t.Fatalf("settle request to %s: %v", req.Subject, err)
		}
		return resp
	}
	for _, c := range []struct{ name, charge, actual, want string }{
		{"no cost", charge, "two", spillway.HeaderCostActual},
		{"tampered cost", strings.Replace(charge, ";5;", ";0;", 1), "1", "cost"},
	} {
		resp := settle(c.charge, c.actual)
		if st, e := resp.Header.Get(spillway.HeaderStatus), resp.Header.Get(spillway.HeaderError); st != spillway.HandlerPermanent || !strings.Contains(e, c.want) {
			t.Errorf("%s: %s %q; want permanent, naming %s", c.name, st, e, c.want)
		}
	}
	if resp := settle(charge, "1"); resp.Header.Get(spillway.HeaderStatus) != spillway.HandlerOK {
		t.Fatalf("settle at 1: %s %q, want ok", resp.Header.Get(spillway.HeaderStatus), resp.Header.Get(spillway.HeaderError))
	}
	if resp := settle(charge, "1"); resp.Header.Get(spillway.HeaderStatus) != spillway.HandlerOK {
		t.Fatalf("the same settle again: %s, want ok (and nothing done)", resp.Header.Get(spillway.HeaderStatus))
	}
	if got := gauges(t, reg)["spillway_cost_settled_units_total{direction=refunded,queue=q}"]; got != 4 {
		t.Errorf("refunded units %v, want 4 (once)", got)
	}
}
