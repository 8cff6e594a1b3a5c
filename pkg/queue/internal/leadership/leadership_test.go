package leadership_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/pkg/queue/internal/leadership"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Two electors of one lease: one leads at a time; when the leader stops
// it lets the lease go, and the other takes it well before the lease's
// ttl would have run out.
func TestOneLeaderAndAQuickHandover(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	const ttl = 4 * time.Second
	var leading atomic.Int32
	led := make(chan string, 2)
	run := func(name string) (stop func()) {
		kv, err := srv.JetStream(t).CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "lease", Storage: jetstream.MemoryStorage})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() {
			leadership.NewElector(kv, "q.leader", ttl, t.Logf).Hold(ctx, func(lctx context.Context) {
				if n := leading.Add(1); n != 1 {
					t.Errorf("%s leads beside another: %d leaders", name, n)
				}
				led <- name
				<-lctx.Done()
				leading.Add(-1)
			})
		})
		return func() { cancel(); wg.Wait() }
	}
	stopA := run("a")
	var first string
	select {
	case first = <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody leads after 10s")
	}
	stopB := run("b")
	defer stopB()
	select {
	case second := <-led:
		t.Fatalf("%s leads while %s does", second, first)
	case <-time.After(ttl / 2):
	}
	stopA() // "a" lets the lease go on its way out
	stopped := time.Now()
	select {
	case second := <-led:
		if second == first {
			t.Fatalf("%s leads again after it stopped", second)
		}
		if took := time.Since(stopped); took >= ttl {
			t.Fatalf("the handover took %v, want well under the ttl %v", took, ttl)
		}
	case <-time.After(3 * ttl):
		t.Fatal("nobody took the lease over")
	}
}
