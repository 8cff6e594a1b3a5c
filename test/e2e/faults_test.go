package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestKillAdmitterMidBurst: kill -9 of one admitter under load loses no
// job that was answered admitted or queued.
func TestKillAdmitterMidBurst(t *testing.T) {
	c := startCluster(t)
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	victim := c.admitters[0]

	var (
		mu       sync.Mutex
		answered = map[string]answer{}
		failed   atomic.Int64
		sent     atomic.Int64
		wg       sync.WaitGroup
	)
	const callers = 16
	stop := make(chan struct{})
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				a := submitHTTP(t, client, victim.addr, "flood", nil, []byte(fmt.Sprintf("caller %d job %d", g, i)))
				if a.Reply.Status == spillway.Admitted || a.Reply.Status == spillway.Queued {
					mu.Lock()
					answered[a.Reply.ID] = a
					mu.Unlock()
				} else {
					failed.Add(1)
					if a.Code == -1 {
						return // the admitter is gone
					}
				}
			}
		}()
	}
	waitFor(t, 30*time.Second, "300 answers before the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= 300
	})
	victim.kill()
	close(stop)
	wg.Wait()
	t.Logf("kill -9 of an admitter after %d submissions: %d answered admitted or queued, %d without an answer or failed", sent.Load(), len(answered), failed.Load())

	waitFor(t, 60*time.Second, "every answered job at the webhook", func() bool {
		counts := c.hook.countByID()
		for id := range answered {
			if counts[id] == 0 {
				return false
			}
		}
		return true
	})
	counts := c.hook.countByID()
	extra, unanswered := 0, 0
	for id, n := range counts {
		if _, ok := answered[id]; ok {
			extra += n - 1
		} else {
			unanswered++ // stored, but the answer died with the admitter
		}
	}
	t.Logf("lost 0 of %d answered jobs; %d ran more than once; %d jobs ran whose answer was lost with the admitter", len(answered), extra, unanswered)
	if extra != 0 {
		t.Errorf("%d answered jobs reached the webhook more than once", extra)
	}
	// The other admitter still answers.
	if a := submitHTTP(t, client, c.admitters[1].addr, "flood", nil, []byte("after")); a.Reply.Status != spillway.Admitted {
		t.Errorf("the surviving admitter answered %+v", a.Reply)
	}
	// SIGTERM: both workers and the surviving admitter stop cleanly.
	for _, p := range []*process{c.workers[0], c.workers[1], c.admitters[1]} {
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v", p.name, err)
		}
	}
}

const outageConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", timeout: 1s}
http: {listen: "127.0.0.1:0"}
queues:
  - name: limited
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 5, delay: 5}
    backlog: {capacity: 1000, leak_rate: 10/s}
`

// TestRedisOutageFailureModes: with Redis killed, an admitter in each
// failure mode behaves as the mode says, fast; when Redis comes back
// (empty) each recovers by itself.
func TestRedisOutageFailureModes(t *testing.T) {
	nats := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(outageConfig, nats.URL(), rds.Addr()))
	modes := []string{"open", "closed", "local"}
	adm := map[string]*process{}
	for _, m := range modes {
		adm[m] = start(t, "admitter-"+m, bins.admitter, "--config", cfg, "--failure-mode", m)
	}
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	key := 0
	burstOf := func(mode string, n int) (map[spillway.Status]int, []answer, time.Duration) {
		key++
		h := map[string]string{"X-Client": "client-" + strconv.Itoa(key)}
		begin := time.Now()
		var out []answer
		for range n {
			out = append(out, submitHTTP(t, client, adm[mode].addr, "limited", h, []byte("x")))
		}
		return tally(out), out, time.Since(begin) / time.Duration(n)
	}
	// Up: every mode decides in Redis: 6 admitted (e' ≤ 5), none queued
	// beyond delay = burst, 4 rejected.
	for _, m := range modes {
		if n, _, _ := burstOf(m, 10); n[spillway.Admitted] != 6 || n[spillway.Rejected] != 4 {
			t.Fatalf("%s, Redis up: %v, want 6 admitted and 4 rejected", m, n)
		}
	}

	rds.Kill()
	t.Log("Redis killed")
	{
		n, _, per := burstOf("open", 10)
		t.Logf("open, Redis down: %v, %v per submission", n, per)
		if n[spillway.Admitted] != 10 {
			t.Errorf("open: %v, want all 10 admitted", n)
		}
	}
	{
		n, out, per := burstOf("closed", 10)
		t.Logf("closed, Redis down: %v, %v per submission", n, per)
		for _, a := range out {
			if a.Code != http.StatusServiceUnavailable || a.RetryAfter == "" || a.Reply.Type != spillway.ProblemUnavailable {
				t.Errorf("closed: status %d, Retry-After %q, type %q; want 503 with Retry-After and %s", a.Code, a.RetryAfter, a.Reply.Type, spillway.ProblemUnavailable)
				break
			}
		}
		resp, err := get(client, "http://"+adm["closed"].addr+"/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("closed, Redis down: /readyz = %d, want 503", resp.StatusCode)
		}
	}
	{
		n, _, per := burstOf("local", 10)
		t.Logf("local, Redis down: %v, %v per submission", n, per)
		if n[spillway.Admitted] != 6 || n[spillway.Rejected] != 4 {
			t.Errorf("local: %v, want the same limits in memory: 6 admitted, 4 rejected", n)
		}
	}

	rds.Restart(t)
	back := time.Now()
	t.Log("Redis restarted, empty")
	waitFor(t, 10*time.Second, "the closed admitter to admit again", func() bool {
		a := submitHTTP(t, client, adm["closed"].addr, "limited", map[string]string{"X-Client": "probe"}, []byte("x"))
		return a.Code == http.StatusAccepted
	})
	t.Logf("closed: admitting again %v after Redis came back", time.Since(back).Round(time.Millisecond))
	time.Sleep(2500 * time.Millisecond) // the longest backoff before a probe
	for _, m := range modes {
		n, _, per := burstOf(m, 10)
		t.Logf("%s, Redis back: %v, %v per submission", m, n, per)
		if n[spillway.Admitted] != 6 || n[spillway.Rejected] != 4 {
			t.Errorf("%s after Redis returned: %v, want the limits again (6 admitted, 4 rejected)", m, n)
		}
	}
}
