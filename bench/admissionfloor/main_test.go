package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The floor admits a submission over either door as the admitter answers
// it, so that the Go client (and spillctl bench) reads its answers, and
// stores each job, with its payload, in its stream.
func TestFloorAdmitsOverBothDoors(t *testing.T) {
	srv := queuetest.Start(t)
	rdb := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, pw, srv.URL(), rdb.URL(), "floor", "X-Api-Key", "127.0.0.1:0", false)
		_ = pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no ready line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	_, base, ok := strings.Cut(line, " and ")
	if !ok || !strings.HasPrefix(line, "admissionfloor ready: spillway.submit.floor and http://") {
		t.Fatalf("ready line %q: want the NATS subject and the HTTP address", line)
	}
	base = strings.TrimSuffix(strings.TrimSpace(base), "/v1/queues/floor/jobs")

	hc, err := client.NewHTTP(base, client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ncl, err := client.NewNATS(nc, client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	want := map[string]string{} // payload by job id
	for door, c := range map[string]*client.Client{"http": hc, "nats": ncl} {
		payload := "job over " + door
		ans, err := c.Submit(sctx, "floor", []byte(payload), client.WithHeader("X-Api-Key", "k1"))
		if err != nil {
			t.Fatalf("%s: %v", door, err)
		}
		if ans.Verdict != spillway.Admitted || ans.ID == "" {
			t.Fatalf("%s: answer %+v, want admitted with an id", door, ans)
		}
		want[ans.ID] = payload
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(sctx, "FLOOR")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := stream.GetMsg(sctx, seq)
		if err != nil {
			t.Fatalf("stream FLOOR, message %d: %v", seq, err)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		if p, ok := want[id]; !ok || p != string(m.Data) {
			t.Errorf("stored job %q holds %q; the answers gave %v", id, m.Data, want)
		}
		delete(want, id)
	}
}
